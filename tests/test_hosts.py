"""Hosts of many ranks: ranks of one host talk through its memory and share its NIC; one rank a host
is the flat model, bit for bit; the cluster value resolves flags over the profile over defaults."""

import json
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import simpy

from sim.backend import Simulator
from sim.cluster import ASSUMED_MEMORY, build_cluster
from sim.cluster_profile import load_profile
from sim.compute import ComputeModel
from sim.network import MemoryPath, make_network
from sim.run import build_parser, simulate
from twinsgd.programs.ops import Allreduce
from twinsgd.run.config import parse_command
from twinsgd.run.runlog import Charges

ALPHA, BETA = 2e-6, 1e9  # the network: seconds a hop, bytes per second a link
MEMORY = MemoryPath(latency_s=3e-7, bandwidth_Bps=4e9, channels=2)
NBYTES = 1 << 20


def hosts_network(n, ranks_per_host, memory=MEMORY, **kwargs):
    return make_network(
        simpy.Environment(),
        "star",
        n,
        ALPHA,
        BETA,
        ranks_per_host=ranks_per_host,
        memory=memory,
        **kwargs,
    )


def arrivals(net, sends):
    """Start every send ``(source, dest, nbytes)`` at time 0; each message's arrival time."""
    env, times = net.env, {}

    def send(i, source, dest, nbytes):
        yield env.process(net.transfer(source, dest, nbytes, tag=i, payload=None))

    def receive(i, dest):
        yield net.mailbox[dest].get(tag=i)
        times[i] = env.now

    for i, (source, dest, nbytes) in enumerate(sends):
        env.process(send(i, source, dest, nbytes))
        env.process(receive(i, dest))
    env.run()
    return [times[i] for i in range(len(sends))]


def test_two_ranks_of_one_host_talk_through_its_memory_and_never_use_a_link():
    net = hosts_network(4, 2)
    assert net.hops(0, 1) == 0 and net.route(0, 1).nodes == (0,)
    (t,) = arrivals(net, [(0, 1, NBYTES)])
    assert t == pytest.approx(MEMORY.latency_s + NBYTES / MEMORY.bandwidth_Bps, rel=1e-12)
    assert net._links == {}  # no link of the graph was ever made, let alone used
    (t,) = arrivals(hosts_network(4, 2), [(1, 2, NBYTES)])  # host 0 to host 1: the network
    assert t == pytest.approx(ALPHA + NBYTES / BETA, rel=1e-12)


@pytest.mark.parametrize("ranks_per_host", [1, 2, 4, 8])
def test_ranks_sending_off_host_at_once_share_its_nic(ranks_per_host):
    """R ranks of host 0 each send to their partner on host 1 at once: the last arrives after
    R times one message's bytes (FIFO through the shared NIC), with twice the NIC half that."""
    r = ranks_per_host
    sends = [(k, r + k, NBYTES) for k in range(r)]
    last = max(arrivals(hosts_network(2 * r, r), sends))
    assert last == pytest.approx(ALPHA + r * NBYTES / BETA, rel=1e-12)
    rails = max(arrivals(hosts_network(2 * r, r, nic_bandwidth_Bps=2 * BETA), sends))
    assert rails == pytest.approx(ALPHA + r * NBYTES / (2 * BETA), rel=1e-12)


def test_copies_in_one_host_share_its_memory_channels():
    """Four copies at once on two channels: two turns; on eight channels: one."""
    sends = [(0, 1, NBYTES), (1, 2, NBYTES), (2, 3, NBYTES), (3, 0, NBYTES)]
    one = NBYTES / MEMORY.bandwidth_Bps
    two_channels = arrivals(hosts_network(4, 4), sends)
    assert sorted(two_channels) == pytest.approx([MEMORY.latency_s + k * one for k in (1, 1, 2, 2)])
    wide = MemoryPath(MEMORY.latency_s, MEMORY.bandwidth_Bps, channels=8)
    assert max(arrivals(hosts_network(4, 4, memory=wide), sends)) == pytest.approx(
        MEMORY.latency_s + one
    )


def test_one_rank_a_host_is_the_flat_network():
    flat, hierarchical = (
        make_network(None, "fat-tree:4", 16, ALPHA, BETA),
        make_network(None, "fat-tree:4", 16, ALPHA, BETA, ranks_per_host=1, memory=MEMORY),
    )
    for source, dest in [(0, 1), (0, 5), (3, 15), (7, 7)]:
        a, b = flat.route(source, dest), hierarchical.route(source, dest)
        assert (a.nodes, a.latency_s, a.bandwidth_Bps) == (b.nodes, b.latency_s, b.bandwidth_Bps)


def _summary(tmp_path, name, flags):
    argv = [
        "--iterations",
        "6",
        "--no-progress",
        "--out",
        str(tmp_path / name),
        "--algorithm",
        "allreduce",
        "--ghost",
        "1000000",
        *flags,
    ]
    summary = simulate(*parse_command(argv, build_parser()), say=lambda _: None)
    steps = (tmp_path / name / "steps.csv").read_bytes()
    return {k: v for k, v in summary.items() if "wall" not in k}, steps


@pytest.mark.parametrize("collectives", ["message", "closed-form"])
def test_a_run_of_one_rank_a_host_equals_the_flat_run_bit_for_bit(tmp_path, collectives):
    common = ["--nodes", "6", "--collectives", collectives, "--profile", "polus-like"]
    hierarchical = _summary(tmp_path, "r1", [*common, "--ranks-per-host", "1"])
    flat = _summary(
        tmp_path, "flat", [*common, "--ranks-per-host", "1", "--memory-bandwidth", "1B/s"]
    )
    assert hierarchical == flat  # the memory path is never taken: nothing changes
    placed = _summary(tmp_path, "r3", [*common, "--ranks-per-host", "3"])
    assert placed[0]["comm_s"] != flat[0]["comm_s"]


@pytest.mark.parametrize("ranks_per_host", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("ranks", [1, 2, 5, 8, 12])
def test_the_star_ring_link_without_a_network_is_the_networks(ranks, ranks_per_host):
    options = build_parser().parse_args(
        [
            "--nodes",
            str(ranks),
            "--ranks-per-host",
            str(ranks_per_host),
            "--nic-bandwidth",
            "3GB/s",
            "--ghost",
            "1000",
        ]
    )
    cfg = SimpleNamespace(seed=0, batch_size=8, fault_schedule=_no_faults)
    cluster = build_cluster(options, None, cfg, "ghost")
    for nbytes in (0, 4000, 4e6):
        assert cluster.ring_link(nbytes) == cluster.make_network().ring_link(nbytes)


def _no_faults():
    from twinsgd.run.faults import FaultSchedule

    return FaultSchedule()


@pytest.mark.parametrize("size", [4, 6, 8])
@pytest.mark.parametrize("memory", [MemoryPath(3e-6, 4e9, 4), MemoryPath(ALPHA, BETA, 4)])
def test_closed_form_ring_on_hosts_is_its_slowest_step_and_bounds_the_message_level(size, memory):
    """Two ranks a host, memory wide enough for every copy: the closed form charges every ring
    step the slower of the network's and the memory's alpha-beta. At message level a rank
    whose send leaves before its receive arrives saves at most a latency a step, so the message
    level lies within 2(p-1) alphas a call below; with memory like the network, exactly on it."""
    n, calls = 4 * 1000 * size, 2
    chunk = 4 * n / size

    def program(rank):
        buf = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        for _ in range(calls):
            buf = yield Allreduce(buf, op="mean", algo="ring")

    times = {}
    for collectives in ("message", "closed-form"):
        nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
        logs = [_Log() for _ in range(size)]
        network = make_network(None, "star", size, ALPHA, BETA, ranks_per_host=2, memory=memory)
        sim = Simulator(
            nodes, logs, ALPHA, BETA, ComputeModel(seconds_per_sample=0.0), collectives, network
        )
        sim.run([program(r) for r in range(size)])
        times[collectives] = sim.env.now
    steps = calls * 2 * (size - 1)
    step = max(ALPHA + chunk / BETA, memory.latency_s + chunk / memory.bandwidth_Bps)
    assert times["closed-form"] == pytest.approx(steps * step, rel=1e-9)
    if memory == MemoryPath(ALPHA, BETA, 4):
        assert times["message"] == pytest.approx(times["closed-form"], rel=1e-9)
    low = times["closed-form"] - steps * max(ALPHA, memory.latency_s)
    assert low * (1 - 1e-9) <= times["message"] <= times["closed-form"] * (1 + 1e-9)


class _Log(Charges):
    def __init__(self):
        self.sent = self.received = 0

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.sent += bytes_sent
        self.received += bytes_recv

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


@pytest.mark.parametrize(
    ("preset", "ranks_per_host"), [("polus-like", 20), ("lomonosov-2-like", 14)]
)
def test_presets_place_the_studies_ranks_per_node(preset, ranks_per_host):
    profile = load_profile(preset)
    assert profile.ranks_per_host == profile.cores == ranks_per_host
    assert profile.memory is not None and profile.memory.channels >= 1


def test_flags_win_over_the_profile_and_config_json_says_what_was_used(tmp_path):
    _summary(
        tmp_path,
        "run",
        ["--nodes", "28", "--profile", "lomonosov-2-like", "--memory-latency", "1us"],
    )
    cluster = json.loads((tmp_path / "run" / "config.json").read_text())["cluster"]
    assert (cluster["ranks_per_host"], cluster["hosts"]) == (14, 2)
    assert cluster["memory"]["latency_s"] == pytest.approx(1e-6)
    assert cluster["memory"]["bandwidth_Bps"] == pytest.approx(6e9)  # the profile's
    assert cluster["memory"]["source"] == "flags"
    _summary(tmp_path, "default", ["--nodes", "4", "--ranks-per-host", "2"])
    cluster = json.loads((tmp_path / "default" / "config.json").read_text())["cluster"]
    assert cluster["memory"]["source"] == "assumed"
    assert cluster["memory"]["bandwidth_Bps"] == ASSUMED_MEMORY.bandwidth_Bps


def test_a_bad_memory_table_names_the_profile(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[network.memory]\nlatency = "1us"\nbandwidth = "8GB/s"\ntotal_bandwidth = "1GB/s"\n'
    )
    with pytest.raises(ValueError, match=r"bad.toml.*total_bandwidth"):
        load_profile(str(bad))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.run",
            "--profile",
            str(bad),
            "--ghost",
            "10",
            "--iterations",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "total_bandwidth" in done.stderr and "Traceback" not in done.stderr


def test_a_profiles_memory_cache_is_read_and_a_call_whose_buffers_fit_copies_at_its_rate(tmp_path):
    """``[network.memory] cache`` and ``cache_bandwidth``: a call whose host's buffers fit the
    cache copies at the cache's rate, one past it at the memory's (`MemoryPath.within`)."""
    path = tmp_path / "p.toml"
    path.write_text(
        '[network.memory]\nlatency = "1us"\nbandwidth = "2GB/s"\ntotal_bandwidth = "8GB/s"\n'
        'cache = "32MiB"\ncache_bandwidth = "5GB/s"\n'
    )
    memory = load_profile(str(path)).memory
    assert (memory.cache_bytes, memory.cache_bandwidth_Bps, memory.channels) == (2**25, 5e9, 4)
    inside, past = memory.within(2**25), memory.within(2**25 + 1)
    assert (inside.bandwidth_Bps, past.bandwidth_Bps) == (5e9, 2e9)
    assert inside.channels == past.channels == 4 and not inside.cache_bytes
    assert MemoryPath(1e-6, 2e9).within(1) == MemoryPath(1e-6, 2e9)  # no bound: one rate


@pytest.mark.parametrize(
    "keys, match",
    [
        ('cache = "32MiB"\n', "both or neither"),
        ('cache_bandwidth = "5GB/s"\n', "both or neither"),
        ('cache = "0B"\ncache_bandwidth = "5GB/s"\n', "must be > 0"),
        ('cache = "lots"\ncache_bandwidth = "5GB/s"\n', "cache"),
    ],
)
def test_a_bad_memory_cache_names_the_profile_and_the_key(tmp_path, keys, match):
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[network.memory]\nlatency = "1us"\nbandwidth = "2GB/s"\n{keys}')
    with pytest.raises(ValueError, match=rf"bad.toml.*{match}"):
        load_profile(str(bad))


@pytest.mark.parametrize("cache, rate", [("32MiB", 5e9), ("8MiB", 2e9)])
def test_a_training_run_copies_at_the_caches_rate_where_a_hosts_gradients_fit(
    tmp_path, cache, rate
):
    """sim.run on a profile with a memory cache: 2 ranks a host, a ghost of 1e6 parameters (a
    rank's float32 gradient and what it receives of it, 16 MB a host) copy at the cache's
    5 GB/s where the cache holds 32 MiB, and at the memory's 2 GB/s where it holds 8 MiB."""
    profile = tmp_path / "p.toml"
    profile.write_text(
        '[network.memory]\nlatency = "1us"\nbandwidth = "2GB/s"\n'
        f'cache = "{cache}"\ncache_bandwidth = "5GB/s"\n'
    )
    flags = ["--nodes", "4", "--ranks-per-host", "2", "--profile", str(profile)]
    _summary(tmp_path, "run", flags)
    memory = json.loads((tmp_path / "run" / "config.json").read_text())["cluster"]["memory"]
    assert memory["bandwidth_Bps"] == rate and memory["source"] == "profile"
