"""One controller process driving every BMv2 switch of a topology over P4Runtime.

Each switch gets its own primary P4Runtime session (finsy); finsy re-opens a lost stream and calls the
ready handler again on every new session, so a switch that restarted gets its pipeline, its entries and
its queue settings back without anything else noticing. `ControllerThread` runs the asyncio side in a
thread for callers that are not async (the Mininet runner, the CLI).

Reconnection is ours, not finsy's back-off: a session that ends within 2 s of its start makes finsy
wait a fixed 10 s before its next try (finsy/switch.py `_throttle_failure`: module constants, no
option), and a switch that died fails the next try at once, so a BMv2 back in 0.1 s was configured
again only after 10 s (measured: docs/results.md, "Faults, control ports and a second user").
`_supervise` notices a session that went down, polls the switch's gRPC port, and once it listens
replaces the switch in finsy's Controller with a fresh Switch of the same options (finsy's public
add/remove); the ready handler then configures it as on any new session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import finsy as fy

from pcnlab.controller.dataplane import BURST_DIGEST, BurstStart, DataPlaneConfig, PortMode, loss_entry, window_entry
from pcnlab.controller.forwarding import route_entries
from pcnlab.controller.program import P4Program
from pcnlab.controller.endpoints import PortQueue, SwitchEndpoint
from pcnlab.controller.thrift_runtime import SwitchThrift
from pcnlab.errors import PcnLabError

LOG = logging.getLogger("pcnlab.controller")

SUPERVISE_POLL_S = 0.05     # how often the sessions are looked at
REPLACE_AFTER_S = 0.2       # a session down this long while its switch listens again is replaced
REPLACE_EVERY_S = 1.0       # and not again sooner: the fresh session needs a few ms to come up

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
        # Random loss set at run time, by switch and port (kept for a restart like the modes), and a lock
        # per switch that a (re)configuration and a loss change take: what the switch holds is then
        # always what `losses` said before the change (insert, modify or delete is decided from it).
        self.losses: dict[str, dict[int, float]] = {name: {} for name in self.endpoints}
        self._configuring = {name: asyncio.Lock() for name in self.endpoints}
        self.on_burst = list(on_burst)
        # Coroutines run once the sessions are opening, and before they close (e.g. the scheduler's).
        self.on_start: list[Callable[[], Awaitable[None]]] = []
        self.on_stop: list[Callable[[], Awaitable[None]]] = []
        # Called with a switch's name when its configured session went down (it comes back configured),
        # and when another client became primary on it (our writes are refused while it is).
        self.on_down: list[Callable[[str], None]] = []
        self.on_backup: list[Callable[[str], None]] = []
        self._backup: set[str] = set()   # switches another client is primary on, as last seen
        self._listeners: dict[str, asyncio.Task] = {}
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
        async with self._configuring[switch.name]:
            await self._configure(switch)

    async def _configure(self, switch: fy.Switch) -> None:
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
            await switch.insert([loss_entry(port, fraction)
                                 for port, fraction in sorted(self.losses[switch.name].items())])
            await asyncio.to_thread(apply_queues, endpoint)
            for hook in self.on_ready:
                await hook(switch, endpoint)
        except Exception as exc:
            if getattr(exc, "code", None) == fy.GRPCStatusCode.PERMISSION_DENIED:   # "Not primary"
                self._lost_primary(switch.name)
            self.errors.append(f"{switch.name}: {exc}")
            LOG.error("configuring %s failed: %s", switch.name, exc)
            raise
        LOG.info("%s configured in %.0f ms (%d routes)", switch.name,
                 (time.monotonic() - started) * 1e3, len(endpoint.routes))
        self.configured[switch.name] += 1
        self._backup.discard(switch.name)
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

    async def set_loss(self, switch: str, port: int, fraction: float) -> float:
        """Lose `fraction` of the DDL data packets towards `port` at random from now on (kept for a
        restart; 0 removes the port's entry); returns the write's latency in seconds."""
        entry = loss_entry(port, fraction)
        async with self._configuring[switch]:
            started = time.monotonic()
            had = port in self.losses[switch]
            if fraction == 0:
                self.losses[switch].pop(port, None)
            else:
                self.losses[switch][port] = fraction
            if had and fraction == 0:
                await self.switches[switch].delete([entry])
            elif had:
                await self.switches[switch].modify([entry])
            elif fraction:
                await self.switches[switch].insert([entry])
            return time.monotonic() - started

    async def set_learned_gap(self, switch: str, job: int, gap_us: int) -> int:
        """Make `gap_us` the G of job's classes on the switch that have no G of their own (kept for a
        restart); returns how many entries changed."""
        config, changed = self.dataplane[switch].with_learned_gap(job, gap_us)
        if changed:
            await self.switches[switch].modify([c.entry() for c in changed])
            self.dataplane[switch] = config
        return len(changed)

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

    def _listen(self, switch: fy.Switch) -> None:
        if self.dataplane:
            old = self._listeners.get(switch.name)
            if old is not None:
                old.cancel()
            self._listeners[switch.name] = asyncio.create_task(self._listen_for_bursts(switch))

    async def _supervise(self, sessions: fy.Controller) -> None:
        """Replace the session of a switch that went down once its gRPC port listens again (above)."""
        # Per switch: when its session went down and how often it had been configured then (configured
        # again since: a new outage, even if a poll never saw it up); when its session was last replaced.
        outage: dict[str, tuple[float, int]] = {}
        replaced: dict[str, tuple[float, int]] = {}
        while True:
            await asyncio.sleep(SUPERVISE_POLL_S)
            now = time.monotonic()
            for name, switch in list(self.switches.items()):
                count = self.configured[name]
                if count == 0 or switch.is_up:
                    outage.pop(name, None)
                    if switch.is_up and not switch.is_primary:
                        self._lost_primary(name)
                    continue
                if outage.get(name, (0.0, -1))[1] != count:
                    outage[name] = (now, count)
                    LOG.warning("%s: P4Runtime session down", name)
                    for hook in self.on_down:
                        hook(name)
                since = outage[name][0]
                last_time, last_count = replaced.get(name, (-REPLACE_EVERY_S, -1))
                if now - since < REPLACE_AFTER_S or (last_count == count and now - last_time < REPLACE_EVERY_S):
                    continue
                if await _listening(self.endpoints[name].grpc_address):
                    fresh = fy.Switch(name, _other_spelling(switch.address), switch.options)
                    await asyncio.wait_for(sessions.remove(switch).wait(), 5.0)
                    sessions.add(fresh)
                    self.switches[name] = fresh
                    self._listen(fresh)
                    replaced[name] = (now, count)
                    LOG.info("%s: listening again after %.0f ms; a new session", name, (now - since) * 1e3)

    def _lost_primary(self, name: str) -> None:
        """P4Runtime lets any client with a higher election id become primary; say so, once per time.
        The session is then refused (finsy ends it) and replaced every REPLACE_EVERY_S until the other
        client leaves and this one is primary again."""
        if name not in self._backup:
            self._backup.add(name)
            LOG.warning("%s: another P4Runtime client became primary; this controller's writes are refused", name)
            for hook in self.on_backup:
                hook(name)

    async def run(self, stop: asyncio.Event) -> None:
        """Drive the switches until `stop` is set."""
        self._changed = asyncio.Condition()
        for switch in self.switches.values():
            self._listen(switch)
        supervisor = None
        try:
            async with fy.Controller(self.switches.values()) as sessions:
                supervisor = asyncio.create_task(self._supervise(sessions))
                for hook in self.on_start:
                    await hook()
                try:
                    await stop.wait()
                finally:
                    supervisor.cancel()
                    for hook in self.on_stop:
                        await hook()
        finally:
            for task in [*self._listeners.values(), *([supervisor] if supervisor else [])]:
                task.cancel()


def _other_spelling(address: str) -> str:
    """The same IPv4 endpoint spelled the other way (127.0.0.1:P <-> [::ffff:127.0.0.1]:P, IPv4-mapped).

    Hand-written workaround, measured: gRPC shares one connection (subchannel) among channels to the
    same address, and the old session's, refused while the switch was down, sits in gRPC's reconnect
    back-off (1 s, growing); a new session to the same spelling waited it out (forwarding holes of
    0.9-1.2 s in half the tries against 0.26-0.29 s). finsy takes no channel arguments (a local
    subchannel pool would be the clean fix), so each replacement takes the other spelling, whose
    connection is new. Linux connects an IPv6 socket to an IPv4-mapped address as IPv4."""
    host, port = address.rsplit(":", 1)
    if host.startswith("[::ffff:") and host.endswith("]"):
        return f"{host[len('[::ffff:'):-1]}:{port}"
    if host.count(".") == 3 and all(part.isdigit() for part in host.split(".")):
        return f"[::ffff:{host}]:{port}"
    return address


async def _listening(address: str, timeout: float = 0.2) -> bool:
    """A TCP connection to host:port opens (the switch's gRPC server is back)."""
    host, port = address.rsplit(":", 1)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


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
