"""The emulated cluster (``python -m real.cluster``): link rates, contention, CPU quotas, cleanup
after any exit, one-line errors.

Needs root and network namespaces: the module is skipped otherwise, and when a tsgd cluster is
already up (the tests would take it down). Each test brings its own cluster up; the ``cluster``
fixture always takes it down. Rates are the fastest of several round trips: other processes on a
shared 2-core machine can only slow a transfer, never speed it past the shaper.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPI_DIR = ROOT / "tests" / "mpi"
ENV = {**os.environ, "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
PY = sys.executable
# tbf counts whole Ethernet frames; a 1500-byte MTU carries 1448 bytes of TCP payload (20 IP, 32
# TCP with timestamps) in 1514 bytes (14 Ethernet). The payload rate a link of RATE can give is
# RATE * 1448/1514 = 0.956 RATE: that is what "the configured rate" means for a ping-pong.
PAYLOAD_PER_FRAME = 1448 / 1514


def _why_not():
    if os.geteuid() != 0:
        return "needs root (network namespaces, tbf, cgroups)"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs ip (iproute2) and unshare (util-linux)"
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return "needs pyroute2"
    if subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10).returncode:
        return "cannot make network namespaces here"
    if any(Path("/run/netns").glob("tsgd-*")) or Path("/run/tsgd/cluster.json").exists():
        return "a tsgd cluster is up: the tests would take it down"
    return None


WHY_NOT = _why_not()
pytestmark = [
    pytest.mark.mpi,
    pytest.mark.slow,
    pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT)),
]


def cli(*argv, timeout=60):
    """``python -m real.cluster argv``; the CompletedProcess."""
    return subprocess.run(
        [PY, "-m", "real.cluster", *argv],
        cwd=ROOT,
        env=ENV,
        timeout=timeout,
        capture_output=True,
        text=True,
    )


def ok(*argv, timeout=60):
    done = cli(*argv, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def cluster():
    """``up(*flags)`` brings a cluster up; whatever happens, it is taken down afterwards."""
    yield lambda *flags: ok("up", *flags)
    cli("down")


def leftovers():
    """Everything with the tsgd prefix still on the machine."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found = [line.split()[0] for line in netns.splitlines() if line.startswith("tsgd-")]
    found += [p.name for p in Path("/sys/class/net").iterdir() if p.name.startswith("tsgd-")]
    for cgroups in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):  # cgroup v1, v2
        found += [str(p) for p in Path(cgroups).glob("tsgd-*")]
    found += [str(p) for p in Path("/etc/netns").glob("tsgd-*")]
    return found + [p for p in ["/run/tsgd"] if Path(p).exists()]


def processes_with(token):
    """PIDs whose command line contains ``token``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and token in (proc / "cmdline").read_bytes().decode():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def eventually(check, timeout_s=10.0):
    """Poll ``check`` until it returns something falsy; return its last value."""
    deadline = time.monotonic() + timeout_s
    while (value := check()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return value


# -- the links ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "rate_Bps", "nbytes", "round_trips"),
    [
        ("100Mbit", 12.5e6, 1 << 20, 4),
        ("1Gbit", 125e6, 4 << 20, 8),
    ],
)
def test_a_ping_pong_reaches_the_configured_rate(cluster, rate, rate_Bps, nbytes, round_trips):
    cluster("--hosts", "2", "--bandwidth", rate)
    out = ok(
        "run", "-n", "2", "--", PY, str(MPI_DIR / "ping_pong.py"), str(nbytes), str(round_trips)
    )
    best_Bps, _median_Bps, *names = out.split()
    assert float(best_Bps) == pytest.approx(rate_Bps * PAYLOAD_PER_FRAME, rel=0.10)
    assert names == ["h0", "h1"]  # MPI_Get_processor_name: each rank on its own host


def test_three_hosts_pushing_into_one_take_three_times_as_long_and_back(cluster):
    """Incast queues at the switch port toward the hub (its ingress tbf), outcast at the hub's
    own NIC (its egress tbf): either way three messages take three times one."""
    cluster("--hosts", "4", "--bandwidth", "100Mbit")
    out = ok("run", "-n", "4", "--", PY, str(MPI_DIR / "contention.py"), str(1 << 20), "3")
    alone_s, *_, incast, outcast = map(float, out.split())
    assert 2.6 <= incast <= 3.4, out
    assert 2.6 <= outcast <= 3.4, out
    assert alone_s == pytest.approx((1 << 20) / (12.5e6 * PAYLOAD_PER_FRAME), rel=0.10)


def test_a_cpu_share_is_that_fraction_of_a_core(cluster):
    cluster("--hosts", "2", "--cpu", "0.5,0.25")
    out = ok("run", "-n", "2", "--", PY, str(MPI_DIR / "cpu_share.py"), "1")
    ratios = dict(line.split() for line in out.splitlines())
    assert 0.4 <= float(ratios["h0"]) <= 0.6, ratios
    assert 0.15 <= float(ratios["h1"]) <= 0.3, ratios
    for host in json.loads(Path("/run/tsgd/cluster.json").read_text())["hosts"]:
        stat = Path(host["cgroup"], "cpu.stat").read_text().split()  # the quota held them back,
        assert int(stat[stat.index("nr_throttled") + 1]) > 0  # not a busy machine


def test_real_train_runs_across_the_cluster(tmp_path):
    out = tmp_path / "run"
    done = cli(
        "run",
        "--hosts",
        "2",
        "--bandwidth",
        "1Gbit",
        "-n",
        "2",
        "--",
        PY,
        "-m",
        "real.train",
        "--algorithm",
        "allreduce",
        "--dataset",
        "synthetic",
        "--iterations",
        "20",
        "--no-progress",
        "--out",
        str(out),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "config.json").read_text())
    assert (config["nodes"], config["host"], config["status"]) == (2, "h0", "done")
    assert leftovers() == []


# -- up, status, down ------------------------------------------------------------------------------


def test_status_reports_what_is_up_and_down_removes_all_of_it(cluster):
    assert "no cluster is up" in ok("status")
    cluster("--hosts", "3", "--bandwidths", "1Gbit,100Mbit", "--cpu", "0.5")
    lines = ok("status").splitlines()[1:]
    assert [line.split()[:3] for line in lines] == [
        ["h0", "10.213.0.1", "1Gbit"],
        ["h1", "10.213.0.2", "100Mbit"],
        ["h2", "10.213.0.3", "1Gbit"],
    ]
    assert all(line.endswith(" up") for line in lines)
    tbf = subprocess.run(
        ["ip", "netns", "exec", "tsgd-h1", "tc", "qdisc", "show", "dev", "eth0"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    assert "tbf" in tbf and "rate 100Mbit" in tbf
    assert len(leftovers()) == 3 + 4 + 3 + 3 + 1  # netns, bridge + veths, cgroups, /etc, /run

    refused = cli("up", "--hosts", "2")  # one cluster at a time
    assert refused.returncode == 2 and "down" in refused.stderr
    subprocess.run(["ip", "netns", "add", "tsgd-h9"], check=True, timeout=10)  # a crash's leftover
    ok("down")
    assert leftovers() == []
    ok("down")  # idempotent


def test_up_that_fails_midway_leaves_nothing():
    subprocess.run(
        ["ip", "link", "add", "tsgd-h1", "type", "veth", "peer", "name", "tsgd-x1"],
        check=True,
        timeout=10,
    )
    try:  # host 1's switch port cannot be made: its name is taken
        done = cli("up", "--hosts", "3")
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    finally:
        subprocess.run(["ip", "link", "del", "tsgd-h1"], capture_output=True, timeout=10)
    assert leftovers() == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_stopped_launcher_leaves_nothing(tmp_path, sig):
    token = str(tmp_path / "sleeper")  # a path only this test's ranks carry on their command line
    code = (
        "import pathlib, socket, sys, time; pathlib.Path(sys.argv[1] + socket.gethostname())"
        ".touch(); time.sleep(60)"
    )
    launcher = subprocess.Popen(
        [
            PY,
            "-m",
            "real.cluster",
            "run",
            "--hosts",
            "2",
            "--cpu",
            "0.5",
            "-n",
            "2",
            "--",
            PY,
            "-c",
            code,
            token,
        ],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        started = eventually(lambda: len(list(tmp_path.glob("sleeper*"))) < 2, timeout_s=30)
        assert not started, "the ranks did not start"
        assert len(processes_with(token)) >= 2
        launcher.send_signal(sig)
        launcher.wait(timeout=15)
        assert launcher.returncode == (-sig if sig == signal.SIGKILL else 128 + sig)
        assert eventually(lambda: processes_with(token) or leftovers(), timeout_s=10) == []
    finally:
        launcher.kill()
        launcher.wait(timeout=10)
        cli("down")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, None])
def test_a_notebooks_cluster_is_taken_down_however_the_notebook_ends(tmp_path, sig):
    """`twinsgd.analysis.study.emulated_cluster`, as notebooks 3 and 4 use it: killed (a
    test's timeout sends SIGKILL), stopped by SIGTERM (no ``finally`` runs) or at its end, the
    process leaves nothing up."""
    flag = tmp_path / "up"
    code = (
        "import pathlib, sys, time\n"
        "from twinsgd.analysis.study import emulated_cluster\n"
        "with emulated_cluster('--hosts', '2', '--bandwidth', '1Gbit'):\n"
        "    pathlib.Path(sys.argv[1]).touch()\n"
        "    time.sleep(0 if sys.argv[2] == 'end' else 60)\n"
    )
    notebook = subprocess.Popen(
        [PY, "-c", code, str(flag), "end" if sig is None else "wait"],
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert not eventually(lambda: not flag.exists(), timeout_s=30), "the cluster never came up"
        if sig is not None:
            assert leftovers(), "nothing was up to take down"
            notebook.send_signal(sig)
        notebook.wait(timeout=30)
        assert notebook.returncode == (0 if sig is None else -sig)
        assert eventually(leftovers, timeout_s=15) == []
    finally:
        notebook.kill()
        notebook.wait(timeout=10)
        cli("down")


# -- refusals -------------------------------------------------------------------------------------

BAD_INPUT = [
    ["run", "-n", "2", "--", "true"],  # nothing is up
    ["up", "--hosts", "0"],
    ["up", "--hosts", "2", "--bandwidth", "1Gb"],
    ["up", "--hosts", "2", "--bandwidths", "1Gbit,fast"],
    ["up", "--hosts", "2", "--cpu", "0"],
    ["up", "--hosts", "2", "--cpu", "64"],
    ["hold", "--hosts", "0"],
    ["hold", "--bandwidth", "1Gbit"],  # no --hosts
    ["run", "--hosts", "2", "--bandwidth", "10Mbps/s", "-n", "2", "--", "true"],
    ["run", "-n", "2", "--cpu", "0.5", "--", "true"],  # shaping without --hosts
    ["run", "--hosts", "2", "-n", "2"],  # no command
]


def test_bad_input_is_one_line_and_exit_2():
    procs = [
        subprocess.Popen(
            [PY, "-m", "real.cluster", *argv],
            cwd=ROOT,
            env=ENV,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for argv in BAD_INPUT
    ]  # at once: each start costs a second (numpy)
    for argv, proc in zip(BAD_INPUT, procs, strict=True):
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 2, (argv, stderr)
        assert len(stderr.splitlines()) == 1 and "Traceback" not in stderr, (argv, stderr)
    assert leftovers() == []


def _reachable_by_others(path):
    """Whether a user who is neither owner nor group may enter every folder down to ``path``
    and read it (a clone under ``mktemp -d``'s 0700 folder is not)."""
    path = Path(path).resolve()
    return path.stat().st_mode & 0o005 == 0o005 and all(
        p.stat().st_mode & 0o001 for p in path.parents
    )


@pytest.mark.skipif(
    not (_reachable_by_others(ROOT) and _reachable_by_others(Path(PY).parent)),
    reason="user nobody cannot reach the project or its Python (a 0700 folder above them)",
)
def test_without_root_it_says_so_in_one_line():
    done = subprocess.run(
        [
            "setpriv",
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            PY,
            "-m",
            "real.cluster",
            "up",
            "--hosts",
            "2",
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "root" in done.stderr


def _calibrated(out, hosts, ranks):
    """`real.calibrate --quick` (the MLP, no training steps) on ``ranks`` ranks over ``hosts``
    emulated 1 Gbit/s hosts, its profile written to ``out``; the finished process."""
    done = cli(
        "run", "--hosts", str(hosts), "--bandwidth", "1Gbit", "-n", str(ranks), "--",
        PY, "-m", "real.calibrate", "--quick", "--models", "mlp", "--train-steps", "0",
        "--out", str(out),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_calibrating_an_allocation_of_hosts_of_two_ranks_measures_their_memory_and_nic(tmp_path):
    """4 ranks on 2 emulated hosts (2 a host): real.calibrate measures a pair inside a host
    (the memory path, the machine's phase probed around it), the host's ranks sending off-host
    at once (its NIC, shaped to 1 Gbit/s),
    the kernel's CPU a byte between hosts (`[network.stack]`) and the allocation's allreduce,
    written as an OSU table the reader takes back; past the cores, a message's wait for a rank
    polling among the others (`[cluster] poll_wait_s`)."""
    sys.path.insert(0, str(ROOT))
    from sim.cluster_profile import load_profile
    from twinsgd.calibration.osu_tables import read_table

    out = tmp_path / "alloc.toml"
    done = _calibrated(out, hosts=2, ranks=4)
    profile = load_profile(str(out))
    assert profile.ranks_per_host == 2 and profile.memory is not None
    assert profile.memory.bandwidth_Bps > 125e6  # the namespace's own loopback, not the link
    phases = tomllib.loads(out.read_text())["cluster"]["phase_us"]  # around the pair's table
    assert len(phases) == 2 and all(2 * 512 * 1024 / 100e9 * 1e6 < t < 1e6 for t in phases)
    assert 100e6 < profile.nic_bandwidth_Bps < 150e6  # two senders share 1 Gbit/s
    stack = tomllib.loads(out.read_text())["network"]["stack"]  # the kernel's CPU a TCP byte
    assert profile.stack_cpu == (stack["send_s_per_byte"], stack["recv_s_per_byte"])
    assert min(profile.stack_cpu) >= 0 and stack["bytes"] >= 2 * 4 * 2**20
    shaper = tomllib.loads(out.read_text())["network"]["shaper"]
    assert "head_start_bytes" not in shaper  # 2 hosts: no fan-out out of one NIC to time
    assert (
        stack["lost_s_per_byte"] == pytest.approx(sum(profile.stack_cpu))
        and stack["lost_s_per_byte"] > 0
    )
    assert stack["busy_send_s_per_byte"] >= 0 and stack["busy_recv_s_per_byte"] >= 0  # ticks
    table = read_table(f"{out.with_suffix('.osu_allreduce.txt')}:4x2")
    assert table.bench == "osu_allreduce" and table.sizes[-1] == 4**10
    assert "sim.osu osu_allreduce" in done.stdout and "--ranks 4 --ranks-per-host 2" in done.stdout
    if (os.cpu_count() or 1) < 4:  # ranks past the cores over TCP: a message waits for its turn
        cluster = tomllib.loads(out.read_text())["cluster"]  # fitted to that allreduce's turns
        assert (
            profile.poll_wait_s == cluster["poll_wait_s"] > 0 and cluster["poll_wait_pair_s"] >= 0
        )
        assert 0 <= cluster["poll_wait_error"] < 0.5
        assert (
            f"poll_wait_s: {profile.poll_wait_s * 1e6:.3g} us a rank past the cores" in done.stdout
        )
        assert "a rank polling among" in done.stdout


def test_calibrating_three_hosts_measures_a_fan_outs_head_start(tmp_path):
    """3 emulated 1 Gbit/s hosts: real.calibrate times rank 0's blocking Sends of the MLP's
    gradient (670 KB) to the other two; the second receiver sees its message milliseconds
    after the first (the first flow's window goes ahead in the sender's NIC: 4.1-5.4 ms here,
    2026-12-05; an equal share would show both within a barrier's skew), which the profile
    keeps as the 125 KB burst and that gap at 125 MB/s, and the simulator reads."""
    sys.path.insert(0, str(ROOT))
    from sim.cluster_profile import load_profile

    out = tmp_path / "three.toml"
    done = _calibrated(out, hosts=3, ranks=3)
    shaper = tomllib.loads(out.read_text())["network"]["shaper"]
    gap_ms = float(shaper["head_start_source"].split("message ")[1].split(" ms")[0])
    assert 1.0 < gap_ms < 12.0
    assert shaper["head_start_bytes"] == pytest.approx(125_000 + 125e6 * gap_ms / 1e3, rel=1e-2)
    assert load_profile(str(out)).shaping().head_start_bytes == shaper["head_start_bytes"]
    assert "the second receiver saw its message" in done.stdout


def test_run_places_the_ranks_in_blocks_as_the_simulator_does():
    """rank K on host K // ceil(N / hosts), the simulator's rank r on host r // ranks_per_host:
    a 2 x 2 run's measured table and its simulation put the same ranks together."""
    from real.cluster import mpiexec_command

    state = {"hosts": [{"name": f"h{i}", "cgroup": None, "netns": f"n{i}"} for i in range(4)]}

    def placed(n, hosts):
        argv = mpiexec_command({"hosts": state["hosts"][:hosts]}, n, ["cmd"])
        return [argv[i + 1] for i, word in enumerate(argv) if word == "_enter"]

    assert placed(4, 2) == ["h0", "h0", "h1", "h1"] == [f"h{r // 2}" for r in range(4)]
    assert placed(3, 2) == ["h0", "h0", "h1"]
    assert placed(2, 4) == ["h0", "h1"]
