"""DDL workloads as processes in their hosts: PyTorch parameter-server and ring all-reduce jobs, the
burst generator, and background TCP flows, with their per-iteration logs.

The runner's API: `Workloads` (launcher.py: start_job, start_flows, one per network), `JobSpec` and
`FlowSpec` (specs.py), the handles and `WorkloadError` (processes.py); where they run is hosts.py. The
processes are `python -m pcnlab.workloads.{ps,ring,burst,flows}`. Importing this package does not
import PyTorch.
"""

from pcnlab.workloads.launcher import Workloads
from pcnlab.workloads.netutil import PCN_START_DSCP
from pcnlab.workloads.processes import FlowsHandle, JobHandle, WorkloadError
from pcnlab.workloads.specs import FlowSpec, JobSpec

__all__ = ["FlowSpec", "FlowsHandle", "JobHandle", "JobSpec", "PCN_START_DSCP", "WorkloadError", "Workloads"]
