"""``python -m real.cluster``: an emulated cluster on this one machine, as Mininet builds one.

N hosts (network namespaces ``tsgd-h0`` ...) hang off one Linux bridge (the switch); each host's
NIC is a veth shaped in both directions by a token bucket (tbf), and may get a CPU quota (a
cgroup). MPI runs over TCP between the namespaces, so every byte crosses the shaped links.
Building blocks in :mod:`real.netns`.

Examples
--------
As root::

    python -m real.cluster up --hosts 4 --bandwidth 1Gbit --cpu 1,0.5
    python -m real.cluster status
    python -m real.cluster run -n 4 -- python -m real.train --algorithm allreduce
    python -m real.cluster down

A cluster for one command only (taken down on any exit, even if this process is SIGKILLed)::

    python -m real.cluster run --hosts 2 --bandwidth 100Mbit -n 2 -- python tests/mpi/ping_pong.py

A cluster for as long as a script lives, which holds the pipe to ``hold``'s standard input
(`twinsgd.analysis.study.emulated_cluster`: the notebooks)::

    python -m real.cluster hold --hosts 2 --bandwidth 1Gbit    # down when stdin ends

Exit status: 0 done (``run``: the command's own status); 2 bad input or a machine that cannot
do it (one line on stderr, no traceback); 128+N when ``run`` was stopped by signal N.
"""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from real import netns

STATE = Path("/run/tsgd/cluster.json")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 3.0  # after forwarding SIGTERM to the ranks, SIGKILL whatever is left this much later
MAX_RATE_Bps = 2**32 - 1  # tbf's 32-bit rate field as pyroute2 fills it (34 Gbit/s)
# MPICH over TCP between the hosts: no shared memory between ranks that share the machine (which
# would bypass the shaped links), UCX's TCP transport only.
MPI_ENV = {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp"}
# 2 cores, several ranks: one BLAS thread each (with 2 an MLP step is 15x slower); defaults only.
THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


# -- command line --------------------------------------------------------------------------------


def build_parser():
    from twinsgd.cli import OneLineParser

    parser = OneLineParser(
        prog="python -m real.cluster",
        description=(
            "An emulated cluster on this machine: hosts as network namespaces on one bridge, "
            "each NIC shaped by tbf in both directions, optional CPU quotas; MPI runs across it "
            "over TCP."
        ),
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="{up,status,down,run,hold}")
    up = sub.add_parser("up", help="build the hosts, the switch and the links")
    _add_shape_arguments(up, hosts_required=True)
    hold = sub.add_parser(
        "hold",
        help="up, then down when standard input ends",
        description=(
            "Bring a cluster up, print its status, and take it down when standard input ends: "
            "the writer closed it, or died however it died (a script holding the pipe keeps "
            "the cluster for as long as it lives, even if it is SIGKILLed); at a terminal, "
            "Ctrl-D or Ctrl-C."
        ),
    )
    _add_shape_arguments(hold, hosts_required=True)
    sub.add_parser("status", help="what is up, checked against the system")
    sub.add_parser("down", help="remove everything with the tsgd prefix (idempotent)")
    run = sub.add_parser(
        "run",
        help="run CMD as N MPI ranks on the emulated hosts",
        description=(
            "Run CMD under mpiexec, the ranks in blocks: rank K on host K // ceil(N / hosts). "
            "With --hosts, bring a cluster up for this command only and take it down on any "
            "exit."
        ),
    )
    run.add_argument("-n", type=int, required=True, metavar="N", help="number of ranks")
    _add_shape_arguments(run, hosts_required=False)
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    guard = sub.add_parser("_guard")  # internal: the ephemeral cluster's guardian
    guard.add_argument("--teardown", action="store_true")
    return parser


def _add_shape_arguments(parser, hosts_required):
    parser.add_argument(
        "--hosts",
        type=int,
        required=hosts_required,
        metavar="N",
        help=f"number of emulated hosts h0..h{{N-1}} (1 to {netns.MAX_HOSTS})",
    )
    parser.add_argument(
        "--bandwidth",
        metavar="RATE",
        help="every host's NIC rate, both directions (default 1Gbit; also 100Mbit, 1Gbps, 125MB/s)",
    )
    parser.add_argument(
        "--bandwidths",
        metavar="LIST|FILE",
        help="per-host rates, comma-separated or one per line in FILE; a shorter list is cycled",
    )
    parser.add_argument(
        "--cpu",
        metavar="LIST",
        help="per-host CPU share in cores (0.5: half a core), cycled; a cgroup CPU quota",
    )
    parser.add_argument(
        "--burst",
        metavar="SIZE",
        help="tbf bucket, e.g. 64KiB (default: 1 ms of traffic, at least ten 1514-byte frames)",
    )


def _parse_rate(text):
    """Bytes/s from ``1Gbit`` (tc's spelling), ``1Gbps``, ``125MB/s``, within tbf's range."""
    from twinsgd.run.units import parse_tc_rate_Bps

    text = text.strip()
    try:
        rate_Bps = parse_tc_rate_Bps(text)
    except ValueError:
        raise ValueError(
            f"bandwidth {text!r} needs a unit, as in 1Gbit, 100Mbit, 1Gbps or 125MB/s"
        ) from None
    if not 0 < rate_Bps <= MAX_RATE_Bps:
        raise ValueError(f"bandwidth {text!r} must be > 0 and at most 34Gbit (tbf's 32-bit rate)")
    return rate_Bps


def _per_host(text, n, what):
    """Split a comma list (or a FILE, one item a line, # comments) into n items, cycled."""
    if os.path.isfile(text):
        with open(text) as fh:
            items = [line.split("#")[0].strip() for line in fh]
    else:
        items = text.split(",")
    items = [item.strip() for item in items if item.strip()]
    if not items or len(items) > n:
        raise ValueError(f"{what} needs 1 to {n} items (one per host, cycled), got {len(items)}")
    return [items[k % len(items)] for k in range(n)]


def _host_plan(args):
    """The hosts to build from the flags: dicts with k, rate text and bytes/s, burst, cpu."""
    from twinsgd.run.units import parse_nbytes

    n = args.hosts
    if not 1 <= n <= netns.MAX_HOSTS:
        raise ValueError(f"--hosts must be 1 to {netns.MAX_HOSTS}, got {n}")
    rates = (
        _per_host(args.bandwidths, n, "--bandwidths")
        if args.bandwidths
        else [args.bandwidth or "1Gbit"] * n
    )
    shares = (
        [None] * n if args.cpu is None else [_cpu_share(s) for s in _per_host(args.cpu, n, "--cpu")]
    )
    burst_B = None if args.burst is None else parse_nbytes(args.burst)
    if burst_B is not None and burst_B < netns.MTU + netns.FRAME_OVERHEAD:
        raise ValueError(f"--burst must hold a full frame (>= 1514B), got {args.burst}")
    hosts = []
    for k, (rate, share) in enumerate(zip(rates, shares, strict=True)):
        rate_Bps = _parse_rate(rate)
        hosts.append(
            {
                "k": k,
                "name": netns.host_name(k),
                "netns": netns.netns_name(k),
                "address": netns.address(k),
                "rate": rate,
                "rate_Bps": rate_Bps,
                "burst_B": burst_B or netns.default_burst(rate_Bps),
                "cpu": share,
            }
        )
    return hosts


def _cpu_share(text):
    try:
        share = float(text)
    except ValueError:
        raise ValueError(f"--cpu: {text!r} is not a number of cores") from None
    if not 0 < share <= netns.cores():
        raise ValueError(f"--cpu share must be in (0, {netns.cores()}] cores, got {text}")
    return share


# -- state ---------------------------------------------------------------------------------------


def read_state():
    """The state file's document, or None when no cluster was recorded."""
    try:
        return json.loads(STATE.read_text())
    except FileNotFoundError:
        return None


def _write_state(hosts):
    STATE.parent.mkdir(parents=True, exist_ok=True)
    cgroups = {h["k"]: str(netns.cgroup_root() / h["netns"]) for h in hosts if h["cpu"]}
    doc = {
        "prefix": netns.PREFIX,
        "bridge": netns.BRIDGE,
        "subnet": f"{netns.SUBNET}.0/24",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "queue_s": netns.QUEUE_S,
        "hosts": [{**h, "cgroup": cgroups.get(h["k"])} for h in hosts],
    }
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(STATE)
    return doc


def _is_up():
    return STATE.exists() or bool(netns.our_namespaces()) or netns.BRIDGE in netns.our_links()


# -- up, status, down ----------------------------------------------------------------------------


def up(hosts):
    """Build the cluster of ``hosts`` (from :func:`_host_plan`) and record it; on any failure,
    tear down what was made and re-raise. Returns the state document."""
    if _is_up():
        raise netns.ClusterError(
            "a tsgd cluster is already up: run `python -m real.cluster down` first"
        )
    builder = os.getpid()
    try:
        netns.build(hosts)
        return _write_state(hosts)
    except BaseException:
        if os.getpid() != builder:  # a forked helper of pyroute2's that failed (`interrupt_in`)
            os._exit(1)
        down()
        raise


def hold(hosts):
    """``hold``: `up`, the status on stdout, then `down` once stdin ends (its writer closed it
    or died, SIGKILL included), or on Ctrl-C or SIGTERM to this process (then exit 130). A
    closed terminal's SIGHUP is ignored: its stdin ends too."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, interrupt_in(os.getpid()))  # as Ctrl-C: down, then 130
    if _is_up():
        raise ValueError("a tsgd cluster is already up: run `python -m real.cluster down` first")
    try:
        up(hosts)
        _print_to_a_pipe("\n".join(status_lines()))
        while os.read(sys.stdin.fileno(), 65536):  # until the writer's end closes (whatever
            pass  # it writes is dropped, a chunk at a time)
    finally:
        down()
    return 0


def interrupt_in(pid):
    """A SIGTERM handler that stops process ``pid`` as Ctrl-C does (KeyboardInterrupt, so its
    ``finally`` takes the cluster down) and ends any forked child of it at once, as SIGTERM's
    default would. pyroute2 forks helpers (into a namespace, to make one) and stops them with
    SIGTERM; one that raised instead unwound a copy of this process's stack, ran its `down`
    while the cluster was being built, and read netlink replies meant for its parent, which
    then waited for them for ever (1 `hold` in 20-60 hung so; found 2026-12-03)."""

    def handler(signum, frame):
        if os.getpid() != pid:
            os._exit(128 + signum)
        raise KeyboardInterrupt

    return handler


def down():
    """Remove every trace of the cluster, known to the state file or not; idempotent."""
    removed = netns.teardown()
    with contextlib.suppress(FileNotFoundError):
        STATE.unlink()
        removed += 1
    with contextlib.suppress(OSError):  # /run/tsgd, unless something else was put there
        STATE.parent.rmdir()
    return removed


def status_lines():
    """One line per host: name, address, rate, burst, CPU share, and whether it exists."""
    state, present = read_state(), set(netns.our_namespaces())
    if state is None:
        extra = f" (but {len(present)} tsgd namespaces exist: run down)" if present else ""
        return [f"no cluster is up{extra}"]
    lines = [
        f"{len(state['hosts'])} hosts on bridge {state['bridge']} ({state['subnet']}), "
        f"up since {state['created']}"
    ]
    for h in state["hosts"]:
        cpu = "all cores" if h["cpu"] is None else f"{h['cpu']:g} cores"
        there = "up" if h["netns"] in present else "MISSING"
        lines.append(
            f"{h['name']}  {h['address']:<12} {h['rate']:>9} "
            f"({h['rate_Bps'] * 8 / 1e6:g} Mbit/s each way)  burst {h['burst_B']}B  "
            f"cpu {cpu}  netns {h['netns']} {there}"
        )
    return lines


# -- run -----------------------------------------------------------------------------------------


def mpiexec_command(state, n, command):
    """The MPMD command line: ranks in blocks, as Slurm's default distribution and MPICH's
    ``-ppn`` place them and as the simulator does (rank K on host K // ceil(n / hosts): 4
    ranks on 2 hosts are 0, 1 on h0 and 2, 3 on h1), each entered through this module's
    ``_enter`` (cgroup, UTS namespace, hostname) and then ``ip netns exec``."""
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    hosts = state["hosts"]
    per_host = -(-n // len(hosts))
    argv = [mpiexec]
    for rank in range(n):
        h = hosts[rank // per_host]
        argv += [":"] if rank else []
        argv += [
            "-n",
            "1",
            sys.executable,
            "-m",
            "real.cluster",
            "_enter",
            h["name"],
            h["cgroup"] or "-",
            h["netns"],
            *command,
        ]
    return argv


def _enter(argv):
    """``_enter HOSTNAME CGROUP|- NETNS CMD ...``: become the host, then exec ``ip netns exec
    NETNS CMD``. The cgroup is joined first: ``ip netns exec`` mounts a fresh /sys, without
    /sys/fs/cgroup. Kept free of numpy and argparse: it runs once per rank."""
    hostname, cgroup, name, *command = argv
    try:
        netns.enter_host(hostname, None if cgroup == "-" else cgroup)
        if os.environ.get("TWINSGD_TRACE_MARKS") == "1":  # (schedtrace's, before /sys goes)
            _pass_trace_marker()
        os.execvp("ip", ["ip", "netns", "exec", name, *command])
    except OSError as err:
        print(f"python -m real.cluster: {hostname}: {err}", file=sys.stderr)
        return 127


def _pass_trace_marker():
    """Open tracefs's ``trace_marker`` for the rank this process becomes and name its
    descriptor in ``TWINSGD_TRACE_MARKS_FD`` (`real.backend.trace_marker`): ``ip netns exec``
    mounts a /sys without tracefs. Where it cannot be opened, the rank marks nothing."""
    try:
        marker = os.open("/sys/kernel/tracing/trace_marker", os.O_WRONLY)
    except OSError:
        return
    os.set_inheritable(marker, True)
    os.environ["TWINSGD_TRACE_MARKS_FD"] = str(marker)


def launch(state, n, command, guard):
    """Run ``command`` on n ranks across the cluster; return its exit status (128+N when this
    process got signal N: the ranks are then stopped, SIGTERM then SIGKILL, and anything left
    in the namespaces killed)."""
    # TWINSGD_CLUSTER: the ranks know they run on this emulated cluster (real.calibrate
    # records its shaping in the profile, so the simulator can model the token buckets)
    env = {**THREAD_ENV, **os.environ, **MPI_ENV, "TWINSGD_CLUSTER": str(STATE)}
    proc = subprocess.Popen(mpiexec_command(state, n, command), env=env, start_new_session=True)
    guard.watch(proc.pid)
    stopped = []

    def stop(signum, frame):
        stopped.append((signum, time.monotonic()))
        _killpg(proc.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                status = proc.wait(timeout=0.2)
                break
            if stopped and time.monotonic() - stopped[0][1] > GRACE_S:
                _killpg(proc.pid, signal.SIGKILL)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if stopped:
        _killpg(proc.pid, signal.SIGKILL)
        netns.kill_inside()
        return 128 + stopped[0][0]
    return 128 - status if status < 0 else status


def _killpg(pgid, sig):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class Guard:
    """The guardian: a child in its own session, ignoring SIGINT, that holds the read end of a
    pipe only this process can write to. When it reads EOF without "done" (this process died,
    however: even SIGKILL), it kills the ranks' process group and what is left in the namespaces
    and, with ``teardown``, takes the cluster down."""

    def __init__(self, teardown):
        read, self._write = os.pipe()  # both non-inheritable: mpiexec gets neither
        argv = [sys.executable, "-m", "real.cluster", "_guard"] + ["--teardown"] * teardown
        self.proc = subprocess.Popen(
            argv, stdin=read, stdout=subprocess.DEVNULL, start_new_session=True
        )
        os.close(read)

    def watch(self, pgid):
        os.write(self._write, f"pgid {pgid}\n".encode())

    def release(self):
        """Tell the guardian all is cleaned up; wait for it to go."""
        with contextlib.suppress(OSError):
            os.write(self._write, b"done\n")
            os.close(self._write)
        self.proc.wait(timeout=30)


def _guard(teardown):
    """The guardian's loop (see :class:`Guard`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pgids, done = [], False
    for line in sys.stdin.buffer:
        word, _, value = line.decode().partition(" ")
        if word == "pgid":
            pgids.append(int(value))
        done = word.strip() == "done"
    if done:
        return 0
    for pgid in pgids:
        _killpg(pgid, signal.SIGKILL)
    netns.kill_inside()
    if teardown:
        down()
    return 0


def run(args, parser):
    """``run``: on the cluster that is up, or (--hosts) on one made for this command."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run needs a command: run -n N -- CMD ...")
    if args.n < 1:
        parser.error(f"-n must be >= 1, got {args.n}")
    if args.hosts is None:
        shaped = [f for f in ("bandwidth", "bandwidths", "cpu", "burst") if getattr(args, f)]
        if shaped:
            parser.error(
                f"--{shaped[0]} shapes a cluster made for this command: give --hosts "
                "too (or use `up` for a lasting one)"
            )
        state = read_state()
        if state is None:
            parser.error(
                "no cluster is up: run `python -m real.cluster up --hosts N` first, "
                "or give run --hosts N for a cluster for this command only"
            )
        missing = [h["netns"] for h in state["hosts"] if h["netns"] not in netns.our_namespaces()]
        if missing:
            parser.error(f"the cluster is broken ({', '.join(missing)} missing): run down, up")
        guard = Guard(teardown=False)
        try:
            return launch(state, args.n, command, guard)
        finally:
            guard.release()
    hosts = _host_plan(args)
    if _is_up():
        parser.error(
            "a tsgd cluster is already up: run `python -m real.cluster down` first, "
            "or run without --hosts to use it"
        )
    guard = Guard(teardown=True)
    try:
        return launch(up(hosts), args.n, command, guard)
    finally:
        down()
        guard.release()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_enter"]:  # the rank wrapper: no argparse, no numpy
        return _enter(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.action == "_guard":
            return _guard(args.teardown)
        if args.action != "status":
            netns.check_machine()
        if args.action == "up":
            up(_host_plan(args))
            print("\n".join(status_lines()))
            return 0
        if args.action == "hold":
            return hold(_host_plan(args))
        if args.action == "status":
            _print_to_a_pipe("\n".join(status_lines()))
            return 0
        if args.action == "down":
            print(f"removed {down()} things with the {netns.PREFIX} prefix")
            return 0
        return run(args, parser)
    except (ValueError, netns.ClusterError) as err:
        parser.error(str(err))
    except KeyboardInterrupt:  # during up or down (run handles its own): cleaned up already
        return 128 + signal.SIGINT


def _print_to_a_pipe(text):
    """Print ``text``; a reader that stops early (``status | head``) is no error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit


if __name__ == "__main__":
    sys.exit(main())
