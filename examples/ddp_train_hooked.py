"""examples/ddp_train.py with PCN Lab's hook: the one added line is `attach(model)` where the script
makes its DistributedDataParallel model (here passed in as `on_ddp`, so the script is not copied).

The hook logs every iteration's compute and communication times in PCN Lab's per-iteration schema
(jobs/<job>/rank<N>-<host>.jsonl) and, in pcn-host runs, announces each iteration's gradients
(PCN-START) to the ring successor one lead ahead; run outside PCN Lab it does nothing.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ddp_train  # noqa: E402
from pcnlab.workloads.hook import attach  # noqa: E402

if __name__ == "__main__":
    ddp_train.main(on_ddp=attach)
