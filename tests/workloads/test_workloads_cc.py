"""A host's default congestion control can be any the kernel has, even one the machine does not list
as allowed (a namespace other than the first may only default to an allowed one: EPERM, even to root)."""

from __future__ import annotations

import subprocess

from conftest import needs_root
from pcnlab.workloads.hosts import ALLOWED_CC, allow_congestion_control


@needs_root
def test_available_cc_becomes_settable_in_a_new_namespace():
    available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    for cc in available:
        allow_congestion_control(cc)
        assert cc in ALLOWED_CC.read_text().split()
        out = subprocess.run(["unshare", "--net", "sh", "-c",
                              f"sysctl -qw net.ipv4.tcp_congestion_control={cc} && "
                              "cat /proc/sys/net/ipv4/tcp_congestion_control"],
                             capture_output=True, text=True)
        assert out.stdout.strip() == cc, out.stderr
