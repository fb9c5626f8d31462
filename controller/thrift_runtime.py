"""BMv2's thrift runtime, for what P4Runtime cannot do on BMv2: egress queue rate and depth, and the
switch's clock. Uses BMv2's own generated thrift client (`sswitch_runtime`)."""

from __future__ import annotations

from pcnlab.errors import ToolchainMissing, PcnLabError
from pcnlab.toolchain import INSTALL_HINT


class ThriftError(PcnLabError):
    """The switch's thrift runtime could not be reached or refused a call."""


class SwitchThrift:
    """A connection to one simple_switch's thrift runtime (`simple_switch` service)."""

    def __init__(self, port: int, host: str = "127.0.0.1", name: str = "switch"):
        try:
            from sswitch_runtime import SimpleSwitch
            from thrift.protocol import TBinaryProtocol, TMultiplexedProtocol
            from thrift.transport import TSocket, TTransport
        except ImportError as exc:
            raise ToolchainMissing(f"BMv2's thrift client is missing ({exc.name}); {INSTALL_HINT}") from None
        self.name = name
        self._transport = TTransport.TBufferedTransport(TSocket.TSocket(host, port))
        protocol = TBinaryProtocol.TBinaryProtocol(self._transport)
        self._client = SimpleSwitch.Client(TMultiplexedProtocol.TMultiplexedProtocol(protocol, "simple_switch"))
        try:
            self._transport.open()
        except TTransport.TTransportException as exc:
            raise ThriftError(f"{name}: cannot reach the thrift runtime on {host}:{port} ({exc})") from None

    def set_queue_rate(self, port: int, rate_pps: int) -> None:
        """Drain rate of the port's egress queue, in packets per second."""
        self._call("set_egress_queue_rate", port, rate_pps)

    def set_queue_depth(self, port: int, depth_pkts: int) -> None:
        """Capacity of the port's egress queue, in packets; BMv2 drops arrivals beyond it."""
        self._call("set_egress_queue_depth", port, depth_pkts)

    def elapsed_us(self) -> int:
        """Microseconds since the switch started: the clock of its packet timestamps."""
        return self._call("get_time_elapsed_us")

    def since_epoch_us(self) -> int:
        return self._call("get_time_since_epoch_us")

    def _call(self, method: str, *args):
        try:
            return getattr(self._client, method)(*args)
        except Exception as exc:  # thrift raises its own exception types, and socket errors
            raise ThriftError(f"{self.name}: thrift {method}{args} failed: {exc}") from None

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "SwitchThrift":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
