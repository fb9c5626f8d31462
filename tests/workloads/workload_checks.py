"""Checks the workload tests share: the arithmetic of a synchronisation, from the dumped tensors."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from pcnlab.jsonlines import read_json_lines


def load(folder: Path, tag: str) -> dict[str, torch.Tensor]:
    return torch.load(folder / f"{tag}.pt")


def check_log_format(path: Path, iterations: int) -> list[dict]:
    anchor, records = read_json_lines(path)
    assert anchor["type"] == "anchor" and anchor["wall_time"] > 1e9 and anchor["host_ns"] > 0
    assert all(r["host_ns"] >= anchor["host_ns"] for r in records)
    its = [r for r in records if r["type"] == "iteration"]
    assert [r["iter"] for r in its] == list(range(iterations)), path
    for r in its:
        assert anchor["host_ns"] <= r["compute_start_ns"] <= r["compute_end_ns"] <= r["host_ns"], r
        assert r["comm_start_ns"] <= r["comm_end_ns"], r
        assert r["bytes_sent"] > 0 and r["bytes_recv"] > 0
        assert "loss" in r
    assert records[-1]["type"] == "end" and records[-1]["status"] == "ok"
    return its


def check_ps_sync(job, iterations: int, lr: float) -> None:
    """Each PS shard's gradient is the workers' mean; every worker then holds the PS's parameters,
    which moved by exactly -lr times that mean (plain SGD)."""
    tensors = job.folder / "tensors"
    workers = [p for p in job.procs if p.label.startswith("worker")]
    shards = [p for p in job.procs if p.label.startswith("ps")]
    previous = load(tensors, f"w{workers[0].rank}_init_param")
    for w in workers[1:]:
        assert all(torch.equal(previous[k], v) for k, v in load(tensors, f"w{w.rank}_init_param").items())
    for it in range(iterations):
        avg, ps_params = {}, {}
        for s in shards:
            avg.update(load(tensors, f"ps{s.rank}_it{it}_avg"))
            ps_params.update(load(tensors, f"ps{s.rank}_it{it}_param"))
        assert set(avg) == set(previous), "every parameter belongs to exactly one shard"
        grads = [load(tensors, f"w{w.rank}_it{it}_grad") for w in workers]
        for name in avg:
            mean = torch.stack([g[name] for g in grads]).mean(0)
            assert torch.allclose(avg[name], mean, atol=1e-7), (it, name)
            assert not all(torch.equal(grads[0][name], g[name]) for g in grads[1:]), "workers saw different data"
            assert torch.allclose(ps_params[name], previous[name] - lr * avg[name], atol=1e-6), (it, name)
        for w in workers:
            params = load(tensors, f"w{w.rank}_it{it}_param")
            assert all(torch.equal(params[k], ps_params[k]) for k in ps_params), (it, w.label)
        previous = ps_params
    shas = [[r["params_sha"] for r in job.records(w.label)] for w in workers]
    assert all(s == shas[0] for s in shas) and len(set(shas[0])) == iterations


def check_ring_sync(job, iterations: int, lr: float) -> None:
    """Every worker's reduced gradient is the mean of all local ones, bit for bit the same on every
    replica, and the replicas' parameters stay identical."""
    tensors = job.folder / "tensors"
    workers = job.procs
    previous = load(tensors, f"w{workers[0].rank}_init_param")
    for it in range(iterations):
        grads = [load(tensors, f"w{w.rank}_it{it}_grad") for w in workers]
        avgs = [load(tensors, f"w{w.rank}_it{it}_avg") for w in workers]
        params = [load(tensors, f"w{w.rank}_it{it}_param") for w in workers]
        for name in previous:
            mean = torch.stack([g[name] for g in grads]).mean(0)
            assert torch.allclose(avgs[0][name], mean, atol=1e-7), (it, name)
            assert all(torch.equal(a[name], avgs[0][name]) for a in avgs[1:]), (it, name)
            assert all(torch.equal(p[name], params[0][name]) for p in params[1:]), (it, name)
            assert torch.allclose(params[0][name], previous[name] - lr * avgs[0][name], atol=1e-6)
        previous = params[0]
    shas = [[r["params_sha"] for r in job.records(w.label)] for w in workers]
    assert all(s == shas[0] for s in shas) and len(set(shas[0])) == iterations


def losses(job) -> list[list[float]]:
    return [[r["loss"] for r in job.records(p.label)] for p in job.procs if p.label.startswith("worker")]


def pids_alive(pids) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def processes_in_namespaces(inodes: set[int], exclude: set[int]) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in exclude:
            continue
        try:
            if os.stat(f"/proc/{name}/ns/net").st_ino in inodes:
                found.append(int(name))
        except OSError:
            continue
    return found


# --- Mininet -------------------------------------------------------------------------------------

@contextmanager
def network(run, switch: str, topology: str, **params):
    """A running network of `switch` kind; with BMv2, our controller configures it first."""
    from pcnlab.topologies.network import NetworkOptions, PcnNetwork
    from pcnlab.topologies.topos import make_topology

    topo = make_topology(topology, **params)
    with PcnNetwork(topo, run.path, run.ledger, NetworkOptions(switch=switch)) as net:
        controller = None
        if switch == "bmv2":
            from pcnlab.controller.sessions import ControllerThread, PcnController
            from pcnlab.controller.program import P4Program

            controller = ControllerThread(PcnController(net.endpoints(), P4Program.named())).start()
        try:
            yield net
        finally:
            if controller is not None:
                controller.stop()


@contextmanager
def capture(net, ledger, host: str, path: Path, bpf: str = "tcp or udp"):
    """tcpdump on the host's interface (headers only) while the block runs."""
    h = net.host(host)
    proc = h.popen(["tcpdump", "-i", h.defaultIntf().name, "-n", "-s", "96", "--immediate-mode", "-U", "-w", str(path), bpf],
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ledger.add_process(proc.pid, f"tcpdump in {host}")
    try:
        line = proc.stderr.readline().decode()
        assert "listening on" in line, line
        yield path
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass
class Packet:
    t: float
    src: str
    dst: str
    proto: int
    tos: int
    sport: int
    dport: int
    payload: int


def read_pcap(path: Path) -> list[Packet]:
    """IPv4 TCP/UDP packets of an Ethernet pcap: time, addresses, TOS, ports, L4 payload bytes."""
    data = Path(path).read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    scale = 1e-9 if magic == 0xA1B23C4D else 1e-6
    out, off = [], 24
    while off + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack_from("<IIII", data, off)
        frame = data[off + 16: off + 16 + incl]
        off += 16 + incl
        if len(frame) < 34 or frame[12:14] != b"\x08\x00":
            continue
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        total, proto = struct.unpack_from("!H", ip, 2)[0], ip[9]
        src, dst = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
        l4 = ip[ihl:]
        if proto == 6 and len(l4) >= 13:
            hdr = (l4[12] >> 4) * 4
        elif proto == 17:
            hdr = 8
        else:
            continue
        sport, dport = struct.unpack_from("!HH", l4)
        out.append(Packet(sec + frac * scale, src, dst, proto, ip[1], sport, dport, total - ihl - hdr))
    return out


def bursts(packets: list[Packet], gap_s: float) -> list[tuple[float, int]]:
    """(start time, payload bytes) of each run of packets separated by less than gap_s."""
    out: list[list] = []
    last = None
    for p in packets:
        if last is None or p.t - last > gap_s:
            out.append([p.t, 0])
        out[-1][1] += p.payload
        last = p.t
    return [(t, n) for t, n in out]
