"""PCN's scheduler on the controller's loop: burst-start digests in, pre-drain windows out.

Every digest is logged as a `report` with what it was to the core: an iteration start (first,
learning, match, missed, spurious, refit, resync, ...) or a `sub-burst` of an iteration under way.

The pure core (scheduler_core.py: the models of predictor.py and chain.py, the planner of windows.py) decides;
this module does the I/O around it: it keeps a clock
map per switch (BMv2's thrift clock read from the host, so timers can be set in the switch's clock),
writes and removes `predrain_windows` entries, wakes up when a predicted burst is overdue, forgets a
switch that restarted, removes every window on shutdown, and logs all of it to the event log.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import finsy as fy

from pcnlab.controller.clock import ClockEstimator, ClockSample
from pcnlab.controller.sessions import PcnController
from pcnlab.controller.dataplane import BurstStart
from pcnlab.controller.events import EventLog
from pcnlab.controller.predictor_types import BurstKey, BurstReport, Prediction
from pcnlab.controller.predictor import PredictorBank
from pcnlab.controller.endpoints import SwitchEndpoint
from pcnlab.controller.thrift_runtime import SwitchThrift, ThriftError
from pcnlab.controller.scheduler_core import WindowScheduler
from pcnlab.controller.segments import LearnedGaps
from pcnlab.controller.shift_channel import SETTLE_S, ShiftChannel
from pcnlab.controller.turns import IGNORED, PlanRecord, Turns
from pcnlab.controller.windows import PlannerConfig, Window, WindowChange, WindowPlanner

CLOCK_PERIOD_S = 0.5
MAX_SLEEP_S = 0.05


class PcnScheduler:
    def __init__(self, controller: PcnController, events: EventLog, planner: PlannerConfig,
                 arm: bool = True, channel: ShiftChannel | None = None):
        """`arm=False` learns and logs predictions without writing windows (the baselines' runs).
        `channel`: jobs that share a port take turns (turns.py), their shifts sent over it."""
        self.controller = controller
        self.events = events
        self.arm = arm
        self.channel = channel
        self.turns = Turns() if channel is not None else None
        self._probed: set[int] = set()                 # jobs asked whether they listen for shifts
        self._answered: set[int] = set()               # and those whose answer came
        self._heard: set[int] = set()                  # and those a process of which answered
        self.core = WindowScheduler(PredictorBank(), WindowPlanner(planner))
        self.gaps = LearnedGaps()   # G written into the switches for jobs that leave it out
        self.clocks = {name: ClockEstimator() for name in controller.endpoints}
        self._thrift: dict[str, SwitchThrift] = {}
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.arm_latencies_s: list[float] = []
        # Windows a switch lost with its session, in host time (ns), to arm again once it is configured.
        self._lost: dict[str, list[tuple[Window, int, int]]] = {}
        # Switches whose session dropped and which are not configured again yet: nothing is written to
        # them (a fresh BMv2 without its pipeline crashed, SIGSEGV, on a window write: measured).
        self._down: set[str] = set()
        controller.on_burst.append(self.on_burst)
        controller.on_ready.append(self._switch_ready)
        controller.on_down.append(self._switch_down)
        controller.on_backup.append(lambda name: self.events.write("switch_backup", switch=name))
        controller.on_stop.append(self.shutdown)
        controller.on_start.append(self.start)

    # --- clocks ---------------------------------------------------------------------------------

    def _sample_clock(self, switch: str) -> ClockSample:
        thrift = self._thrift.get(switch)
        if thrift is None:
            thrift = self._thrift[switch] = SwitchThrift(self.controller.endpoints[switch].thrift_port, name=switch)
        before = time.monotonic_ns()
        switch_us = thrift.elapsed_us()
        return ClockSample(before, switch_us, time.monotonic_ns())

    async def _take_clock_sample(self, switch: str) -> ClockSample | None:
        """One sample into the switch's clock estimator (None: thrift failed, logged); a restart it
        reveals is logged and what was learned in the old clock forgotten."""
        try:
            sample = await asyncio.to_thread(self._sample_clock, switch)
        except ThriftError as exc:
            self._thrift.pop(switch, None)
            self.events.write("clock_error", switch=switch, error=str(exc))
            return None
        if self.clocks[switch].add(sample):
            self.events.write("switch_clock_reset", switch=switch)
            self.core.forget_switch(switch)
            self.gaps.forget_switch(switch)
        return sample

    async def _keep_clocks(self) -> None:
        while True:
            for switch, estimator in self.clocks.items():
                sample = await self._take_clock_sample(switch)
                if sample is None:
                    continue
                clock = estimator.map
                self.events.write("clock", switch=switch, switch_us=sample.switch_us,
                                  round_trip_us=sample.round_trip_ns / 1000,
                                  error_us=round(clock.error_us, 1), drift_ppm=round(clock.drift_ppm, 2))
            await asyncio.sleep(CLOCK_PERIOD_S)

    def switch_now_us(self, switch: str) -> int | None:
        clock = self.clocks[switch].map
        return clock.to_switch_us(time.monotonic_ns()) if clock is not None else None

    # --- reports in, windows out ----------------------------------------------------------------

    def on_burst(self, switch: str, burst: BurstStart) -> None:
        if burst.ended:
            self._on_end(switch, burst)
            return
        report = BurstReport(switch, burst.port, burst.job, burst.ts_us, burst.queue_pkts, burst.idle_us)
        covered = self.core.planner.covering(report.key, report.t_us)
        observation, changes = self.core.on_report(report)
        gap_us = self.core.iteration_gap_us(report.key)     # the split learned so far (None: none yet)
        self.events.write("report", switch=switch, port=burst.port, job=burst.job, t_us=burst.ts_us,
                          queue_pkts=burst.queue_pkts, kind=observation.kind, covered=bool(covered),
                          idle_us=burst.idle_us, gap_us=gap_us)
        if observation.predicted_us is not None:
            self.events.write("actual", switch=switch, port=burst.port, job=burst.job, t_us=burst.ts_us,
                              predicted_us=observation.predicted_us, error_us=observation.error_us,
                              was_confident=observation.was_confident, covered=bool(covered),
                              window=[covered[0].start_us, covered[0].end_us] if covered else None,
                              model=observation.model)
        own = (observation.prediction,) if observation.kind != "sub-burst" else ()
        for prediction in own + observation.forecasts:
            if prediction is not None:
                self._log_prediction(prediction, burst.ts_us)
        if self.turns is not None and gap_us is not None and burst.job not in self._probed:
            self._probed.add(burst.job)          # its iterations are told apart: does it listen?
            self._tasks.append(asyncio.ensure_future(self._probe(burst.job)))
        if self.turns is not None and observation.kind != "sub-burst":
            at_ns = time.monotonic_ns() + int(SETTLE_S * 1e9)      # from when a plan made now holds
            clock = self.clocks[switch].map
            holds_us = clock.to_switch_us(at_ns) if clock is not None else burst.ts_us + int(SETTLE_S * 1e6)
            # A job is planned once its starts are told apart and its probe has answered; a listening
            # job's starts before then count too (the split's, from the segmenter's history). Not an
            # unmodified script's: its history is its setup and warm-up (interleave-unmodified at
            # 6fe82e8, rep 3: a first split at 20 ms among its first flights gave it four 'starts' 107 ms
            # apart at once; plans made in its warm-up then moved the generator 367 and 345 ms).
            told = gap_us is not None and burst.job in self._answered
            earlier = () if not told or burst.job not in self._heard or self.turns.told(switch, burst.port, burst.job) \
                else [(r.t_us, r.idle_us) for r in self.core.iteration_starts(report.key)]
            was = self.turns.ignored.get(burst.job, 0)
            record = self.turns.on_start(switch, burst.port, burst.job, burst.ts_us, burst.idle_us,
                                         told, holds_us, earlier, gap_us)
            if was < IGNORED <= self.turns.ignored.get(burst.job, 0):
                self.events.write("interleave_skip", job=burst.job, reason="its communication came well before "
                                  "the slot sent to it (it ignores its shifts): left where it is")
            if record is not None:
                self.events.write("interleave_plan", **record.fields())
                self._tasks.append(asyncio.ensure_future(self._send_shifts(record, at_ns)))
        gap = self.gaps.observe(report.key, burst.idle_us, observation.kind != "sub-burst", gap_us)
        if gap is not None and switch not in self._down:
            self._tasks.append(asyncio.ensure_future(self._write_gap(switch, burst.job, gap)))
        self._tasks.append(asyncio.ensure_future(self._apply(changes)))
        self._wake.set()

    def _on_end(self, switch: str, burst: BurstStart) -> None:
        """A burst ended: the cause of its port's next start (chain.END), planned if that is the model."""
        key = BurstKey(switch, burst.port, burst.job)
        now = burst.ts_us + burst.idle_us
        forecasts, changes = self.core.on_end(key, burst.ts_us, now)
        self.events.write("end", switch=switch, port=burst.port, job=burst.job, t_us=burst.ts_us,
                          seen_us=now, queue_pkts=burst.queue_pkts)
        for prediction in forecasts:
            self._log_prediction(prediction, now)
        self._tasks.append(asyncio.ensure_future(self._apply(changes)))
        self._wake.set()

    def _log_prediction(self, prediction: Prediction, decided_us: int) -> None:
        key = prediction.key
        self.events.write("prediction", switch=key.switch, port=key.port, job=key.job,
                          next_start_us=prediction.next_start_us, period_us=round(prediction.period_us),
                          confidence=round(prediction.confidence, 3), jitter_us=round(prediction.jitter_us),
                          confident=prediction.confident, model=prediction.model, decided_us=decided_us)

    async def _send_shifts(self, record: PlanRecord, at_ns: int) -> None:
        """Each shift of a plan, with its slot (on the hosts' clock), to its job's processes, all before one
        wait for refusals (ShiftChannel.send_plan), holding from `at_ns`; a job none of whose hosts listens
        is fixed from then on (its port plans again without moving it) and named."""
        clock = self.clocks[record.switch].map

        def slot(order) -> int | None:
            return clock.to_host_ns(round(order.start_us)) if clock is not None and order.start_us is not None else None
        answers = await asyncio.to_thread(self.channel.send_plan,
                                          [(o.job, o.shift_us, o.plan, slot(o)) for o in record.orders], at_ns)
        for order in record.orders:      # a job never added to the channel: no host, {}
            hosts = answers[order.job]
            self.events.write("shift", switch=order.switch, port=order.port, job=order.job,
                              shift_us=round(order.shift_us), plan=order.plan, hosts=hosts,
                              start_us=None if order.start_us is None else round(order.start_us))
            if not any(v == "sent" for v in hosts.values()):
                self._fix(order.job)

    async def _probe(self, job: int) -> None:
        """Whether `job` listens for shifts, asked as its iterations are first told apart; the job is not
        planned before the answer (then with its starts from the first), and one that does not listen is
        fixed before any plan moves others around it. Found at its first plan instead, the plan that sent
        it a shift had sent the others their slots too, a margin later, and they waited for them (a
        generator job beside an unmodified script: 242 ms, into a collision the next plan then moved it
        640 ms out of; 2a57e64)."""
        hosts = await asyncio.to_thread(self.channel.probe, job)
        if not hosts:                        # its processes are not registered yet: asked at its next start
            self._probed.discard(job)
            return
        self.events.write("interleave_probe", job=job, hosts=hosts)
        self._answered.add(job)
        if any(v == "sent" for v in hosts.values()):
            self._heard.add(job)
        else:
            self._fix(job)

    def _fix(self, job: int) -> None:
        """`job` is not shifted from now on: none of its processes listens (an unmodified script, or none
        registered), or, if one answered its probe, they have all ended (the job finished)."""
        self.turns.fix(job)
        if job in self._heard:
            self.events.write("interleave_ended", job=job, reason="its processes no longer listen: the job ended")
        else:
            self.events.write("interleave_skip", job=job, reason="no process of the job listens for "
                              "shifts (an unmodified script, or no sender registered): left where it is")

    async def _write_gap(self, switch: str, job: int, gap_us: int) -> None:
        try:
            written = await self.controller.set_learned_gap(switch, job, gap_us)
        except Exception as exc:  # a switch that went away: it is configured again with what it had
            self.events.write("gap_error", switch=switch, job=job, gap_us=gap_us, error=str(exc))
            return
        if written:
            self.events.write("learned_gap", switch=switch, job=job, gap_us=gap_us, entries=written)

    async def _apply(self, changes: list[WindowChange]) -> None:
        for change in changes:
            w = change.window
            fields = dict(switch=w.switch, port=w.port, job=w.job, start_us=w.start_us, end_us=w.end_us,
                          predicted_us=w.predicted_us, lead_us=w.lead_us, reason=change.reason, decided_us=change.at_us)
            if change.op == "skip":
                self.events.write("skip", **fields)
                continue
            if not self.arm:
                self.events.write(f"would_{change.op}", **fields)
                continue
            if w.switch in self._down:          # carried over once it is configured (_switch_down)
                self.events.write("window_error", **fields, op=change.op, error="switch down")
                continue
            try:
                if change.op == "arm":
                    latency = await self.controller.arm_window(w.switch, w.port, w.start_us, w.end_us)
                    self.arm_latencies_s.append(latency)
                    self.events.write("arm", **fields, late=change.late, write_ms=round(latency * 1e3, 3))
                else:
                    await self.controller.remove_window(w.switch, w.port, w.start_us, w.end_us)
                    self.events.write("disarm", **fields)
            except Exception as exc:  # a switch that went away: its windows went with it
                self.events.write("window_error", **fields, op=change.op, error=str(exc))

    async def _ticks(self) -> None:
        while True:
            for switch in self.clocks:
                now = self.switch_now_us(switch)
                if now is not None:
                    changes = self.core.tick(switch, now)
                    if changes:
                        await self._apply(changes)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), MAX_SLEEP_S)
            except asyncio.TimeoutError:
                pass

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks += [asyncio.ensure_future(self._keep_clocks()), asyncio.ensure_future(self._ticks())]

    def _switch_down(self, name: str) -> None:
        """The switch's session dropped (a crash, a restart, another primary): note which of its windows
        are still to come, in host time, before its clock may change."""
        self.events.write("switch_down", switch=name)
        self._down.add(name)
        clock = self.clocks[name].map
        if clock is not None:
            now = time.monotonic_ns()
            self._lost[name] = [(w, clock.to_host_ns(w.start_us), clock.to_host_ns(w.end_us))
                                for w in self.core.planner.armed() if w.switch == name
                                and clock.to_host_ns(w.end_us) > now]

    async def _switch_ready(self, switch: fy.Switch, endpoint: SwitchEndpoint) -> None:
        # Configuring a switch cleared its tables (and a restart also reset its clock).
        self.core.forget_switch(switch.name)
        self.gaps.forget_switch(switch.name)
        self.events.write("switch_ready", switch=switch.name, times=self.controller.configured[switch.name] + 1)
        self._down.discard(switch.name)
        lost = self._lost.pop(switch.name, [])
        if lost:
            await self._carry(switch.name, lost)

    async def _carry(self, name: str, lost: list[tuple[Window, int, int]]) -> None:
        """Arm the lost windows again, moved into the switch's clock as it is now (a restarted BMv2
        counts from zero): a fresh clock sample, then each window at the same host time."""
        self._thrift.pop(name, None)            # its connection went with the old process
        if await self._take_clock_sample(name) is None:
            return
        clock = self.clocks[name].map
        now_us = clock.to_switch_us(time.monotonic_ns())
        changes = []
        for window, start_ns, end_ns in lost:
            end_us = clock.to_switch_us(end_ns)
            if end_us > now_us:
                moved = replace(window, start_us=max(clock.to_switch_us(start_ns), now_us), end_us=end_us)
                changes.append(self.core.planner.carry(moved, now_us))
        await self._apply(changes)

    async def shutdown(self) -> None:
        """Leave no window armed."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        now = {s: self.switch_now_us(s) or 0 for s in self.clocks}
        await self._apply(self.core.shutdown(max(now.values(), default=0)))
        for thrift in self._thrift.values():
            thrift.close()
        if self.channel is not None:
            self.channel.close()
        self.events.write("scheduler_stopped", **{"arm_writes": len(self.arm_latencies_s)})
