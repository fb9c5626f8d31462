"""Builds and runs a Mininet network for a topology, recording what it starts in the run's ledger."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from mininet.link import Link, TCLink
from mininet.net import Mininet
from mininet.node import CPULimitedHost, Host
from mininet.nodelib import LinuxBridge

from pcnlab.controller.endpoints import SwitchEndpoint, save_endpoints
from pcnlab.errors import PcnLabError, UsageError
from pcnlab.ledger import RunLedger
from pcnlab.topologies.cleanup import clean_stale
from pcnlab.topologies import control_ports
from pcnlab.topologies.bmv2 import Bmv2StartError, Bmv2Switch, free_port
from pcnlab.rates import FRAME_BYTES
from pcnlab.topologies.routing import compute_routes, port_queues, ports_of
from pcnlab.topologies.mininet_topo import PcnTopo
from pcnlab.topologies.topos import HOST_QUEUES, SWITCH_KINDS
HOST_QUEUE_FRAMES = 1000         # a paced host's queue holds what a NIC's does (txqueuelen)
# Mininet names root-namespace interfaces s1-eth1, ...: two networks at once would collide, so a
# machine runs one PcnNetwork at a time and the next one waits for this lock.
NETWORK_LOCK = Path(os.environ.get("PCNLAB_LOCK", "/run/pcnlab/network.lock"))
REVIVE_ATTEMPTS = 3   # starts of a switch that died, before the run fails


@dataclass(frozen=True)
class NetworkOptions:
    switch: str = "bmv2"             # bmv2: one simple_switch_grpc per switch; bridge: Linux bridges
    packet_log: bool = False         # BMv2's per-packet log (the slow, logging build)
    pcap: bool = False               # a pcap per BMv2 port
    grpc_base_port: int | None = None    # s<N> listens on base+N-1; None: free ports
    thrift_base_port: int | None = None
    host_cpu: float | None = None    # CPU share per host (CPULimitedHost); None: no limit
    pace_hosts: bool = False         # bmv2: hosts send at most their link's rate (see host_pacing)
    host_queue: str = "fifo"         # a paced host's queue: fifo (host_pacing) or fair (fair_host_pacing)
    realtime: bool = False           # bmv2: switches under SCHED_FIFO (Bmv2Switch, realtime)

    def __post_init__(self):
        if self.switch not in SWITCH_KINDS:
            raise UsageError(f"unknown switch kind {self.switch!r}; choose one of {', '.join(SWITCH_KINDS)}")
        if self.host_queue not in HOST_QUEUES:
            raise UsageError(f"unknown host queue {self.host_queue!r}; choose one of {', '.join(HOST_QUEUES)}")


class _Tracked:
    """Mixes into Mininet node classes: the node's shell is in the ledger as soon as it exists."""

    def __init__(self, name, ledger: RunLedger, **params):
        self._ledger = ledger
        super().__init__(name, **params)

    def startShell(self, *args, **kwargs):  # noqa: N802  (Mininet's name)
        if self.inNamespace:
            with self._ledger.making_namespace():
                super().startShell(*args, **kwargs)
                self._ledger.add_namespace(self.name, self.pid)
        else:
            super().startShell(*args, **kwargs)
            self._ledger.add_process(self.pid, f"shell of {self.name}")


class TrackedHost(_Tracked, Host):
    pass


class TrackedCPULimitedHost(_Tracked, CPULimitedHost):
    pass


class TrackedBridge(_Tracked, LinuxBridge):
    def start(self, controllers):
        super().start(controllers)
        self._ledger.add_interface(self.name)


class TrackedBmv2Switch(_Tracked, Bmv2Switch):
    pass


def _tracked_link(base: type[Link], ledger: RunLedger):
    class TrackedLink(base):
        def __init__(self, node1, node2, **params):
            super().__init__(node1, node2, **params)
            for intf in (self.intf1, self.intf2):
                ledger.add_interface(intf.name)  # only root-namespace ends are recorded

    return TrackedLink


def host_pacing(intf: str, mbps: float) -> str:
    """The tc command that makes a host's end of its link send at most `mbps`: a token bucket two full
    frames deep, its queue that of a NIC (1000 frames).

    On BMv2 a link's rate lives in the switch's egress queue, so a host's end sends at veth speed
    (gigabits/s): eight workers' bursts reach the switch at once, faster than BMv2 parses packets (about
    37,000/s here), and wait in BMv2's input buffer, a queue no real switch has, before they reach
    the bottleneck queue being studied (the fidelity check sees it as processing lag). A real host's NIC
    serialises at its link's rate: so does this. tc on the host's end sits before the switch, so the
    bottleneck queues stay BMv2's own where several senders meet (a port fed by one host at its own
    rate never queues in BMv2: the host's bucket does). A `schedule:` rate change reaches the switch's
    side only, so raising a paced host's link is refused when the file is read."""
    frame = FRAME_BYTES
    return (f"tc qdisc replace dev {intf} root tbf rate {mbps:g}mbit burst {2 * frame} "
            f"limit {HOST_QUEUE_FRAMES * frame}")


def fair_host_pacing(intf: str, mbps: float, peers: list[str]) -> list[str]:
    """host_pacing with one queue per destination host, served in turn (HTB: a class per peer address,
    each guaranteed an even share and lent the whole link), instead of one FIFO.

    Why: a FIFO sends what the sockets wrote in the order they wrote it, so a parameter server that
    posts its parameters to every worker at once (gloo's isend per worker, LTP's sender threads) still
    delivers them one worker after another, each after the ones written before it, and its workers
    start their next gradients that far apart. A Linux host's own default queue (fq_codel) interleaves
    flows; this kernel has neither fq_codel nor sfq, so HTB does it per destination host (what a PS's
    pushes differ by). Anything to an address not listed (ARP, other hosts) shares a class of its own.
    The tc commands, one each: a host's shell reads a line of at most 4095 bytes (the terminal's), which
    16 peers' commands joined would exceed."""
    frame = FRAME_BYTES
    share = mbps / (len(peers) + 1)
    cls = f"burst {2 * frame} cburst {2 * frame} quantum {frame}"
    cmds = [f"tc qdisc replace dev {intf} root handle 1: htb default 2",
            f"tc class add dev {intf} parent 1: classid 1:1 htb rate {mbps:g}mbit ceil {mbps:g}mbit {cls}"]
    for minor, ip in enumerate([None, *peers], start=2):
        cmds += [f"tc class add dev {intf} parent 1:1 classid 1:{minor:x} htb rate {share:g}mbit "
                 f"ceil {mbps:g}mbit {cls}",
                 f"tc qdisc add dev {intf} parent 1:{minor:x} handle {minor:x}: pfifo limit {HOST_QUEUE_FRAMES}"]
        if ip is not None:
            cmds.append(f"tc filter add dev {intf} parent 1: protocol ip prio 1 u32 match ip dst {ip}/32 "
                        f"flowid 1:{minor:x}")
    return cmds


def check_supported(topo: PcnTopo, options: NetworkOptions) -> None:
    """Refuse, before anything starts, a combination that cannot forward."""
    if options.switch == "bridge" and topo.has_loops():
        raise UsageError("this topology has loops, which Linux bridges without STP cannot forward; "
                         "use switch: bmv2")


class PcnNetwork:
    """A running Mininet network of a PcnTopo. Use as a context manager, or start()/stop()."""

    def __init__(self, topo: PcnTopo, run_dir: Path, ledger: RunLedger,
                 options: NetworkOptions = NetworkOptions()):
        check_supported(topo, options)
        self.topo = topo
        self.run_dir = Path(run_dir)
        self.ledger = ledger
        self.options = options
        self.net: Mininet | None = None
        self._lock_fd: int | None = None
        self._nft_table: str | None = None

    def _acquire_lock(self, say=print, timeout: float = 900.0) -> None:
        NETWORK_LOCK.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(NETWORK_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        started = time.monotonic()
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                if not waiting:
                    whose = f" (pid {holder})" if holder != "?" else " (it is starting)"
                    say(f"waiting for another PCN Lab network to finish{whose}")
                    waiting = True
                if time.monotonic() - started > timeout:
                    os.close(fd)
                    raise PcnLabError(f"another PCN Lab network (pid {holder}) has been running for over "
                                      f"{timeout:.0f} s; stop it, or `pcnlab clean` if it is dead")
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def _switch_class(self):
        if self.options.switch == "bridge":
            return functools.partial(TrackedBridge, ledger=self.ledger)
        base_grpc, base_thrift = self.options.grpc_base_port, self.options.thrift_base_port
        chosen: set[int] = set()  # this network's ports so far: none is bound before its switch starts

        def port(base: int | None, n: int) -> int:
            picked = base + n - 1 if base else free_port(avoid=chosen)
            chosen.add(picked)
            return picked

        def make(name, **params):
            n = int("".join(ch for ch in name if ch.isdigit()))
            return TrackedBmv2Switch(
                name, ledger=self.ledger, log_dir=self.run_dir,
                packet_log=self.options.packet_log, pcap=self.options.pcap, realtime=self.options.realtime,
                grpc_port=port(base_grpc, n), thrift_port=port(base_thrift, n),
                on_process=self.ledger.add_process, **params)

        return make

    def start(self) -> "PcnNetwork":
        opts = self.options
        self._acquire_lock()
        # Whatever a dead run left (interfaces named like ours, processes) goes before we build.
        for report in clean_stale():
            print(f"cleaned up after a dead run: {report.summary()}")
        if opts.host_cpu is not None:
            host = functools.partial(TrackedCPULimitedHost, ledger=self.ledger, cpu=opts.host_cpu)
        else:
            host = functools.partial(TrackedHost, ledger=self.ledger)
        # tc shaping sits after BMv2 and would build a second queue: BMv2 ports get plain links and
        # their rates from the switch's own queues; bridges get TCLink.
        link = _tracked_link(TCLink if opts.switch == "bridge" else Link, self.ledger)
        self.net = Mininet(topo=self.topo, switch=self._switch_class(), host=host, link=link,
                           controller=None, autoSetMacs=False, autoStaticArp=False, build=False)
        try:
            self.net.build()
            self._guard_control_ports()   # before the switches listen
            self._configure_hosts()
            self.net.start()
        except BaseException:
            self.stop()
            raise
        self._write_description()
        return self

    def _guard_control_ports(self) -> None:
        """The BMv2 switches' thrift and gRPC ports reachable from loopback only (control_ports.py)."""
        ports = [p for sw in self.bmv2_switches for p in (sw.thrift_port, sw.grpc_port)]
        if ports:
            self._nft_table = control_ports.table_name(self.ledger.data.run_id)
            self.ledger.add_nft_table(self._nft_table)
            control_ports.guard(self._nft_table, ports)

    def _configure_hosts(self) -> None:
        for host in self.net.hosts:
            host.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1")
            for intf in host.intfNames():
                if intf != "lo":
                    # TCP through BMv2 fails with checksum offload on (ping still works).
                    host.cmd(f"ethtool --offload {intf} rx off tx off sg off >/dev/null 2>&1")
        self.net.staticArp()
        fair = self.options.host_queue == "fair"
        for host, intf, mbps in self.paced_links():
            peers = [self.net.get(h).IP() for h in self.topo.traffic_hosts() if h != host] if fair else []
            cmds = fair_host_pacing(intf, mbps, peers) if fair else [host_pacing(intf, mbps)]
            out = "".join(self.net.get(host).cmd(c) for c in cmds).strip()
            if out:  # tc says nothing when it succeeds
                raise PcnLabError(f"pacing {host}'s {intf} at {mbps:g} Mbit/s failed: {out.splitlines()[0]}")

    def paced_links(self) -> list[tuple[str, str, float]]:
        """(host, its interface, the link's Mbit/s) for every host link with a rate, when hosts are
        paced (bmv2 only: bridges shape both ends already); else none."""
        if not (self.options.pace_hosts and self.options.switch == "bmv2"):
            return []
        hosts = set(self.topo.hosts())
        out = []
        for a, b, info in self.topo.links(withInfo=True):
            host, other = (a, b) if a in hosts else (b, a)
            if host in hosts and info.get("bw") is not None:
                intf, _ = self.net.get(host).connectionsTo(self.net.get(other))[0]
                out.append((host, intf.name, float(info["bw"])))
        return out

    def stop(self) -> None:
        try:
            if self.net is not None:
                self._end_interrupted_commands()
                self._save_pacing()
                self.net.stop()
                self.net = None
        finally:
            if self._nft_table is not None:
                control_ports.remove(self._nft_table)
                self._nft_table = None
            self._release_lock()

    def _end_interrupted_commands(self) -> None:
        """A node's command interrupted while `cmd` waited on it (Ctrl-C, or SIGTERM as Ctrl-C) leaves
        its shell waiting, and Mininet's stop then fails on that node: interrupt the command in its
        shell too, and read what it printed up to the shell's prompt."""
        for node in self.net.hosts + self.net.switches:
            if not (node.shell and node.waiting):
                continue
            try:
                node.sendInt()
                deadline = time.monotonic() + 5
                while node.waiting and time.monotonic() < deadline:
                    node.monitor(timeoutms=200)
            except Exception as exc:  # noqa: BLE001 -- the teardown must go on
                print(f"{node.name}: its interrupted command did not end cleanly ({exc})")
            node.waiting = False  # a command that ignored the interrupt: its shell goes with the node

    def _save_pacing(self) -> None:
        """What each paced host's bucket did (`tc -s`: sent, dropped, overlimits, backlog), in
        host-pacing.txt: its queue and drops are the host's, where the switch's telemetry cannot see them."""
        links = self.paced_links()
        if not links:
            return
        try:
            text = "".join(f"{host} {intf}\n{self.net.get(host).cmd(f'tc -s qdisc show dev {intf}')}\n"
                           for host, intf, _ in links)
            (self.run_dir / "host-pacing.txt").write_text(text)
        except Exception as exc:  # noqa: BLE001 -- a record lost must not stop the teardown
            print(f"host pacing statistics not saved: {exc}")

    def __enter__(self) -> "PcnNetwork":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- what the rest of the system needs to know -------------------------------------------

    def host(self, name: str):
        return self.net.get(name)

    @property
    def bmv2_switches(self) -> list[Bmv2Switch]:
        return [sw for sw in self.net.switches if isinstance(sw, Bmv2Switch)]

    def revive(self) -> list[tuple[str, int]]:
        """Start again every BMv2 process that ended while the network runs (a crash): same ports, no
        program; the controller's session supervision reconnects and configures it. Returns (switch,
        exit status) for each one started again."""
        revived = []
        for sw in self.bmv2_switches:
            if sw.process is not None and sw.process.poll() is not None:
                status = sw.process.returncode
                for attempt in range(REVIVE_ATTEMPTS):   # killed again while starting (measured once in 53
                    try:                                 # random faults): try again, then fail in one line
                        sw.restart()
                        break
                    except Bmv2StartError:
                        if attempt == REVIVE_ATTEMPTS - 1:
                            raise
                revived.append((sw.name, status))
        return revived

    def endpoints(self) -> list[SwitchEndpoint]:
        """What the controller needs to drive each BMv2 switch."""
        routes = compute_routes(self.topo)
        return [
            SwitchEndpoint(
                name=sw.name, device_id=sw.device_id, grpc_address=sw.grpc_address,
                thrift_port=sw.thrift_port, ports=ports_of(self.topo, sw.name),
                routes=tuple(routes[sw.name]), queues=tuple(port_queues(self.topo, sw.name)),
            )
            for sw in self.bmv2_switches
        ]

    def _write_description(self) -> None:
        desc = {
            "switch_kind": self.options.switch,
            "paced_hosts": {h: {"intf": i, "mbps": m} for h, i, m in self.paced_links()},
            "host_queue": self.options.host_queue if self.paced_links() else None,
            "hosts": {h.name: {"ip": h.IP(), "mac": h.MAC(), "pid": h.pid} for h in self.net.hosts},
            "roles": self.topo.roles,
            "switches": {
                sw.name: {
                    "ports": {str(p): peer for p, peer in ports_of(self.topo, sw.name).items()},
                    **({"device_id": sw.device_id, "grpc": sw.grpc_address, "thrift_port": sw.thrift_port,
                        "pid": sw.process.pid if sw.process else None, "binary": str(sw.build_info.switch)}
                       if isinstance(sw, Bmv2Switch) else {}),
                }
                for sw in self.net.switches
            },
        }
        (self.run_dir / "network.json").write_text(json.dumps(desc, indent=1))
        if self.bmv2_switches:
            save_endpoints(self.endpoints(), self.run_dir / "endpoints.json")
