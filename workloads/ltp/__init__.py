"""LTP, a loss-tolerant transport for a parameter server's gradients (issue 14): datagrams carrying
(iteration, tensor, offset) (wire.py), a worker's out-of-order sender with selective acknowledgements
and a TCP-friendly AIMD window (sender.py, ratecontrol.py), the PS's receiver with Early Close
(receiver.py, earlyclose.py, with its defaults) and Bubble Filling (fill.py). The jobs over it stand beside
the TCP ones: the parameter server's (workloads/ltp_ps.py) and the burst generator's (workloads/ltp_burst.py).
Nothing here imports the rest of workloads/, nor PyTorch.
"""
