"""DDL workloads as processes in their hosts: PyTorch parameter-server and ring all-reduce jobs, the
burst generator, and background TCP flows, with their per-iteration logs.

The runner's API is in `launcher` (start_job, start_flows, JobSpec, FlowSpec); the processes are
`python -m pcnlab.workloads.{ps,ring,burst,flows}`. Importing this package does not import PyTorch.
"""

from pcnlab.workloads.launcher import (FlowSpec, FlowsHandle, JobHandle, JobSpec, WorkloadError, start_flows,
                                       start_job)
from pcnlab.workloads.netutil import PCN_START_DSCP

__all__ = ["FlowSpec", "FlowsHandle", "JobHandle", "JobSpec", "PCN_START_DSCP", "WorkloadError", "start_flows",
           "start_job"]
