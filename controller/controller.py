"""One controller process driving every BMv2 switch of a topology over P4Runtime.

Each switch gets its own primary P4Runtime session (finsy); finsy re-opens a lost stream and calls the
ready handler again on every new session, so a switch that restarted gets its pipeline, its entries and
its queue settings back without anything else noticing. `ControllerThread` runs the asyncio side in a
thread for callers that are not async (the Mininet runner, the CLI).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import finsy as fy

from pcnlab.controller.dataplane import BURST_DIGEST, BurstStart, DataPlaneConfig, PortMode, window_entry
from pcnlab.controller.forwarding import route_entries
from pcnlab.controller.program import P4Program
from pcnlab.controller.specs import PortQueue, SwitchEndpoint
from pcnlab.controller.thrift_runtime import SwitchThrift
from pcnlab.errors import PcnLabError

LOG = logging.getLogger("pcnlab.controller")

# Extra work on every (re)connection of a switch, after forwarding and queues are in place.
ReadyHook = Callable[[fy.Switch, SwitchEndpoint], Awaitable[None]]
# Called on the controller's loop for every burst-start digest.
BurstHandler = Callable[[str, BurstStart], None]


class ControllerError(PcnLabError):
    """A switch did not become ready, or the controller failed."""


def apply_queues(endpoint: SwitchEndpoint) -> None:
    """Set each port's BMv2 egress queue rate and depth through the thrift runtime."""
    if not endpoint.queues:
        return
    with SwitchThrift(endpoint.thrift_port, name=endpoint.name) as thrift:
        for queue in endpoint.queues:
            if queue.rate_pps is not None:
                thrift.set_queue_rate(queue.port, queue.rate_pps)
            if queue.depth_pkts is not None:
                thrift.set_queue_depth(queue.port, queue.depth_pkts)


class PcnController:
    def __init__(self, endpoints: Sequence[SwitchEndpoint], program: P4Program,
                 election_id: int = 10, on_ready: Sequence[ReadyHook] = (),
                 dataplane: Mapping[str, DataPlaneConfig] | None = None,
                 on_burst: Sequence[BurstHandler] = ()):
        self.endpoints = {ep.name: ep for ep in endpoints}
        self.program = program
        self.on_ready = list(on_ready)
        self.dataplane = dict(dataplane or {})
        # The modes in force now (they change at run time and must survive a switch restart).
        self.modes = {name: dict(cfg.modes) for name, cfg in self.dataplane.items()}
        self.on_burst = list(on_burst)
        # Coroutines run once the sessions are opening, and before they close (e.g. the scheduler's).
        self.on_start: list[Callable[[], Awaitable[None]]] = []
        self.on_stop: list[Callable[[], Awaitable[None]]] = []
        # How many times each switch has been (re)configured: a restart shows as a second time.
        self.configured: dict[str, int] = {name: 0 for name in self.endpoints}
        self.errors: list[str] = []
        self._changed: asyncio.Condition | None = None
        options = fy.SwitchOptions(p4info=program.p4info, p4blob=program.json,
                                   initial_election_id=election_id, ready_handler=self._ready)
        self.switches = {
            ep.name: fy.Switch(ep.name, ep.grpc_address, options(device_id=ep.device_id))
            for ep in endpoints
        }

    async def _ready(self, switch: fy.Switch) -> None:
        endpoint = self.endpoints[switch.name]
        started = time.monotonic()
        try:
            await switch.delete_all()
            await switch.insert(route_entries(endpoint.routes))
            config = self.dataplane.get(switch.name)
            if config is not None:
                await switch.modify([config.config_entry()])  # a default action is modified, not inserted
                await switch.insert(config.static_entries())
                await switch.insert([config.mode_entry(port, mode)
                                     for port, mode in sorted(self.modes[switch.name].items())])
            await asyncio.to_thread(apply_queues, endpoint)
            for hook in self.on_ready:
                await hook(switch, endpoint)
        except Exception as exc:
            self.errors.append(f"{switch.name}: {exc}")
            LOG.error("configuring %s failed: %s", switch.name, exc)
            raise
        LOG.info("%s configured in %.0f ms (%d routes)", switch.name,
                 (time.monotonic() - started) * 1e3, len(endpoint.routes))
        self.configured[switch.name] += 1
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def wait_configured(self, times: int = 1, timeout: float = 30.0,
                              switches: Sequence[str] | None = None) -> None:
        """Wait until each switch (default: all) has been configured at least `times` times."""
        assert self._changed is not None, "the controller is not running"
        names = list(switches or self.configured)

        async def done() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: all(self.configured[n] >= times for n in names))

        try:
            await asyncio.wait_for(done(), timeout)
        except asyncio.TimeoutError:
            late = [name for name in names if self.configured[name] < times]
            detail = "; ".join(self.errors) or "no P4Runtime session came up"
            raise ControllerError(f"switches {', '.join(late)} not configured in {timeout:.0f} s: {detail}") from None

    # --- run-time changes --------------------------------------------------------------------

    async def set_mode(self, switch: str, port: int, mode: PortMode) -> None:
        """Change a port's mode on a running switch (no restart, no recompilation)."""
        await self.switches[switch].modify([self.dataplane[switch].mode_entry(port, mode)])
        self.modes[switch][port] = mode

    async def set_queue_rate(self, switch: str, port: int, rate_pps: int) -> float:
        """Change a port's egress queue rate on a running switch (BMv2's thrift runtime, like every queue
        setting), and keep it as the port's rate: a switch that restarts gets it back. Returns the
        call's latency in seconds."""
        endpoint = self.endpoints[switch]
        queues = [q for q in endpoint.queues if q.port != port]
        old = next((q for q in endpoint.queues if q.port == port), PortQueue(port))
        queue = dataclasses.replace(old, rate_pps=rate_pps)
        self.endpoints[switch] = dataclasses.replace(endpoint, queues=tuple(sorted(queues + [queue],
                                                                                   key=lambda q: q.port)))
        started = time.monotonic()
        await asyncio.to_thread(apply_queues, dataclasses.replace(endpoint, queues=(PortQueue(port, rate_pps),)))
        return time.monotonic() - started

    async def arm_window(self, switch: str, port: int, start_us: int, end_us: int) -> float:
        """Write a pre-drain window; returns the write's latency in seconds."""
        started = time.monotonic()
        await self.switches[switch].insert([window_entry(port, start_us, end_us)])
        return time.monotonic() - started

    async def remove_window(self, switch: str, port: int, start_us: int, end_us: int) -> None:
        await self.switches[switch].delete([window_entry(port, start_us, end_us)], strict=False)

    async def _listen_for_bursts(self, switch: fy.Switch) -> None:
        async for digest_list in switch.read_digests(BURST_DIGEST):
            for data in digest_list:
                burst = BurstStart.from_digest(data)
                for handler in self.on_burst:
                    handler(switch.name, burst)
            await switch.write([digest_list.ack()])

    async def run(self, stop: asyncio.Event) -> None:
        """Drive the switches until `stop` is set."""
        self._changed = asyncio.Condition()
        listeners = []
        if self.dataplane:
            listeners = [asyncio.create_task(self._listen_for_bursts(sw)) for sw in self.switches.values()]
        try:
            async with fy.Controller(self.switches.values()):
                for hook in self.on_start:
                    await hook()
                try:
                    await stop.wait()
                finally:
                    for hook in self.on_stop:
                        await hook()
        finally:
            for task in listeners:
                task.cancel()


class ControllerThread:
    """Runs a PcnController on its own event loop in a background thread."""

    def __init__(self, controller: PcnController):
        self.controller = controller
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="pcnlab-controller", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def body() -> None:
            self._stop = asyncio.Event()
            self._started.set()
            await self.controller.run(self._stop)

        try:
            self.loop.run_until_complete(body())
        except BaseException as exc:  # kept for the caller's thread
            self._failure = exc
            self._started.set()
        finally:
            # Let cancelled tasks and open async generators (digest streams) finish on a live loop.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def start(self, timeout: float = 30.0) -> "ControllerThread":
        self._thread.start()
        self._started.wait()
        self.call(self.controller.wait_configured(1, timeout), timeout + 5)
        return self

    def call(self, coro, timeout: float | None = None):
        """Run a coroutine on the controller's loop and return its result."""
        if self._failure is not None:
            raise ControllerError(f"the controller stopped: {self._failure}")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=15)

    def __enter__(self) -> "ControllerThread":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
