"""LTP, a loss-tolerant transport for a parameter server's gradients (issue 14): datagrams carrying
(iteration, tensor, offset) (wire.py), a worker's out-of-order sender with selective acknowledgements
and a TCP-friendly AIMD window (sender.py, ratecontrol.py), the PS's receiver with Early Close
(receiver.py, earlyclose.py) and Bubble Filling (fill.py), and the parameter-server job over it
(ltp_ps.py) and the burst generator's (ltp_burst.py). Importing it does not import PyTorch.
"""
