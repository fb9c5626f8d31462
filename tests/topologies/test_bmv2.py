"""topologies/bmv2.py: where a switch's own ports come from, and a start whose port was taken after it
was checked free (BMv2 keeps running without listening then) failing at once in one line."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from conftest import needs_bmv2
from pcnlab.errors import PortInUse
from pcnlab.topologies import bmv2


def test_free_ports_lie_below_the_kernels_ephemeral_range_and_avoid_what_is_chosen():
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [bmv2.free_port() for _ in range(50)]
    assert all(p in bmv2.CONTROL_PORTS and p < ephemeral_low and bmv2.port_is_free(p) for p in ports)
    only = ports[0]
    assert bmv2.free_port(avoid=set(bmv2.CONTROL_PORTS) - {only}) == only


def test_with_every_port_avoided_the_error_is_one_line():
    with pytest.raises(PortInUse) as err:
        bmv2.free_port(avoid=set(bmv2.CONTROL_PORTS))
    assert "grpc_base_port" in str(err.value) and "\n" not in str(err.value)


@needs_bmv2
@pytest.mark.root
@pytest.mark.parametrize("taken", ["grpc_port", "thrift_port"])
def test_a_port_taken_after_the_check_fails_the_start_at_once(tmp_path, taken):
    switch = bmv2.Bmv2Switch("s7", log_dir=tmp_path)
    try:
        switch._require_free_ports = lambda: None   # the port is taken after the check, as in a race
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", getattr(switch, taken)))   # bound, not listening: as a connection's
            began = time.monotonic()
            with pytest.raises(PortInUse) as err:
                switch._start_process()
            took = time.monotonic() - began
        message = str(err.value)
        assert message.startswith("s7: simple_switch_grpc could not bind") and "\n" not in message
        assert str(getattr(switch, taken)) in message
        assert took < 10, took                    # not the 30 s a start that never listens waits
        assert switch.process is None             # the switch it started is stopped
        switch._start_process()                   # the port free again: the same switch starts
        assert bmv2._listening(switch.grpc_port) and bmv2._listening(switch.thrift_port)
    finally:
        switch.stop()
        switch.terminate()
