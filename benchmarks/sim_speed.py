"""How fast the simulator is: messages per second against a bare SimPy loop in the same run.

    python benchmarks/sim_speed.py            (about 3 minutes on 2 cores)
    python benchmarks/sim_speed.py --quick    (smaller counts: a smoke run of 10-20 s)

1. Message level. `sim.backend.Simulator` runs node programs on bare nodes, as tests/test_sim.py
   does (``--compute profile`` at 0 s per sample: all the time is the machinery's): ping-pong pairs;
   an incast of 31 senders into rank 0, which receives from any source (contention: they queue at
   its NIC); ring allreduces, ``Allreduce(buf, op="sum", algo="ring")``, 2(p-1) messages per rank.
   Every message is 32 bytes. Each case runs with a log that only counts messages, and with a real
   `run.runlog.RunLog` (bookkeeping on): every node closes a step, a steps.csv row, per message it
   sends (ring: per allreduce), and timeline.json is written at the end for the drawn nodes (all 32
   or fewer here), as `sim.run` writes it. The peer is a bare SimPy loop of the same shape: senders
   ``yield timeout(nbytes / beta)``, ``yield timeout(latency)``, ``store.put(m)``; receivers ``yield
   store.get()``. All sides alternate in rounds, so machine noise falls on each of them; the table
   shows the median round, and the SimPy events scheduled per message (read from SimPy's event
   counter: the one figure here that noise cannot move). Target: >= 50k messages/s with contention
   and bookkeeping on, and >= 0.5 x the bare loop.
2. Where the time goes: cProfile over one pass of the RunLog cases, and over scale (a) on the
   event engine's closed form at 2,000 nodes in process; the top functions by own time and the
   own time of all functions summed by group (SimPy core, network model, backend handlers, node
   program, bookkeeping); a builtin's time goes to its callers' groups. Case by case, each
   RunLog case's profiled microseconds per message by group beside the bare loop's (all of it
   SimPy's). Then that closed-form run's microseconds per node-step beside bare SimPy
   processes meeting at one event per step.
3. Scale: ``python -m sim.run`` in a subprocess; its wall and CPU seconds and peak RSS (its own,
   from ``wait4``). (a) ghost ResNet-50 allreduce SGD, closed-form collectives, 10,000 nodes, 100
   iterations, as a user types it (no sampling or evaluation flags, so ``--engine auto``: the
   analytic engine, whose folder is the events' byte for byte), on 2 us / 100 Gbit/s links and
   on the Lomonosov-2-like profile, target under 10 s each; then each with ``--engine events``
   (the event engine's closed form, no target), at 20 and 100 iterations to show that memory
   stays flat.
   (b) gossip on a ring of 210 nodes at message level, 100 iterations, target under 60 s: with
   ghost ResNet-18 payloads, and with the real MLP on the bundled MNIST subset at batch 16 (2
   steps per epoch, so 50 evaluations) with compute from a profile of 1e-5 s per sample.
   (c) ``--engine analytic`` (numpy over the node axis; equal to the closed form, tested): the
   same ghost ResNet-50 allreduce with stragglers and lognormal speeds, 10,000 and 1,000,000
   nodes for 100 iterations, target under 10 s at a million.
   "/ bare event" is the wall time per node-step over that of a bare SimPy timeout, this run.

Targets are shown as ratios (wall / target); nothing passes or fails: the machines are noisy.

    python benchmarks/sim_speed.py --instructions    (about 3 minutes on 2 cores; needs valgrind)

prints instead what noise cannot move: each message-level case's CPU instructions a message
(valgrind's cachegrind over two counts of messages, in subprocesses, the difference over the
difference, so the set-up and the interpreter's start cancel out), beside the bare loop's. A
change to the message path is measured this way on a machine whose speed moves from second to
second; the ratio to the bare loop's instructions is an upper bound of the ratio in time (the
message path's instructions run slower than the bare loop's). Then the same for scale (a): each
of its two commands at 10,000 nodes, as typed and with ``--engine events``, its instructions a
node-step over 4 and 8 iterations, beside bare SimPy processes meeting at one event per step
(`bare_barriers`); steps.csv is flushed on a wall-clock interval, which moves the events' by
about 1k.
"""

import argparse
import cProfile
import gc
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from time import perf_counter, process_time
from types import SimpleNamespace

import numpy as np
import orjson
import simpy

from sim.backend import Simulator, rare_collections
from sim.compute import ComputeModel
from twinsgd.programs.node import Step
from twinsgd.programs.ops import ANY_SOURCE, Allreduce, Recv, Send
from twinsgd.run.runfolder import RunFolder
from twinsgd.run.runlog import Charges, RunLog, chrome_trace_pieces

ROOT = Path(__file__).resolve().parents[1]
ALPHA_S, BETA_BPS = 5e-6, 1.25e9  # 5 us, 10 Gb/s
FLOATS = 8  # float32 per message: 32 bytes
PAIRS, WORKERS, RING = 16, 31, 8  # ping-pong pairs; incast senders into rank 0; ring allreduce p
TARGET_RATE, TARGET_RATIO = 50_000, 0.5


def _events(env):
    """SimPy events scheduled so far in ``env`` (its private id counter; None if that changes)."""
    counter = getattr(env, "_eid", None)
    return next(counter) if counter is not None else None


# -- the bare SimPy peers --------------------------------------------------------------------------


def bare_link_and_store(messages):
    """PAIRS senders, each into its own Store: bytes on the link, latency, put; receivers get.
    Returns (messages, SimPy events)."""
    env, per_pair = simpy.Environment(), messages // PAIRS

    def sender(store):
        for i in range(per_pair):
            yield env.timeout(4 * FLOATS / BETA_BPS)
            yield env.timeout(ALPHA_S)
            store.put(i)

    def receiver(store):
        for _ in range(per_pair):
            yield store.get()

    for store in (simpy.Store(env) for _ in range(PAIRS)):
        env.process(sender(store))
        env.process(receiver(store))
    env.run()
    return per_pair * PAIRS, _events(env)


def bare_timeouts(events):
    """PAIRS processes yielding unit timeouts: the cost of one SimPy event; (events, events)."""
    env, each = simpy.Environment(), events // PAIRS

    def ticker():
        for _ in range(each):
            yield env.timeout(1)

    for _ in range(PAIRS):
        env.process(ticker())
    env.run()
    return each * PAIRS, each * PAIRS


# -- node programs on bare nodes -------------------------------------------------------------------


class _CountingLog(Charges):
    """A log that keeps nothing but the number of messages sent (tests/test_sim.py's, lighter)."""

    def __init__(self):
        self.messages = 0

    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        self.messages += bytes_sent > 0

    def end_step(self, *args):
        """Steps are not recorded."""


def _end_step(node, iteration):
    node.on_step_end(Step(0, iteration, None, None, False, False), 0.0, 0)  # as Node.end_step does


def ping_pong(node, rounds):
    """Pairs (0, 1), (2, 3), ...: the even rank sends, the odd one sends back; a step per round."""
    buf, peer = np.zeros(FLOATS, np.float32), node.rank ^ 1
    for i in range(1, rounds + 1):
        if node.rank % 2 == 0:
            yield Send(dest=peer, payload=buf)
            yield Recv(source=peer, buf=buf)
        else:
            yield Recv(source=peer, buf=buf)
            yield Send(dest=peer, payload=buf)
        _end_step(node, i)


def incast(node, rounds):
    """Every rank but 0 sends ``rounds`` messages to rank 0, which takes them from any source:
    they queue at its NIC. A step per message sent, and per round of receives."""
    buf = np.zeros(FLOATS, np.float32)
    for i in range(1, rounds + 1):
        if node.rank == 0:
            for _ in range(node.size - 1):
                yield Recv(source=ANY_SOURCE, buf=buf)
        else:
            yield Send(dest=0, payload=buf)
        _end_step(node, i)


def ring_allreduces(node, rounds):
    """``rounds`` ring allreduces of 32 bytes per rank and message; a step each."""
    buf = np.zeros(FLOATS * node.size, np.float32)  # zeros: repeated sums stay finite
    for i in range(1, rounds + 1):
        yield Allreduce(buf, op="sum", algo="ring")
        _end_step(node, i)


# case -> (program, ranks, messages per round)
CASES = {
    "ping-pong": (ping_pong, 2 * PAIRS, 2 * PAIRS),
    "incast": (incast, WORKERS + 1, WORKERS),
    "ring allreduce": (ring_allreduces, RING, 2 * RING * (RING - 1)),
}


def simulate_case(case, messages, runlog):
    """Run ``case`` for about ``messages`` messages; (messages sent (checked), SimPy events)."""
    program, size, per_round = CASES[case]
    rounds = max(1, messages // per_round)
    nodes = [SimpleNamespace(rank=r, size=size, reporter=0) for r in range(size)]
    with tempfile.TemporaryDirectory(prefix="twinsgd-simspeed-") as folder, rare_collections():
        # (the collector called rarely throughout, as in sim.run)
        logs = _runlogs(folder, size) if runlog else [_CountingLog() for _ in range(size)]
        sim = Simulator(nodes, logs, ALPHA_S, BETA_BPS, ComputeModel(seconds_per_sample=0.0))
        sim.run([program(node, rounds) for node in nodes])
        if runlog:  # the bookkeeping sim.run does: steps.csv's rows, and timeline.json
            logs[0].finish(
                "done", timeline=chrome_trace_pieces(sim.timeline.columns, case, "simulated")
            )
            sent = sum(log.totals["bytes_sent"] for log in logs) // (4 * FLOATS)
        else:
            sent = sum(log.messages for log in logs)
    if sent != rounds * per_round:
        raise RuntimeError(f"{case}: {sent} messages sent, expected {rounds * per_round}")
    return sent, _events(sim.env)


def _runlogs(path, size):
    """One RunLog per rank on a fresh run folder at ``path`` (removed by the caller), sharing one
    steps.csv writer (as sim.run does)."""
    folder, header = RunFolder(path), {"config": {}}
    first = RunLog(folder, header)
    return [first] + [
        RunLog(folder, header, reporter=False, steps=first.steps) for _ in range(size - 1)
    ]


# -- 1. message level ------------------------------------------------------------------------------


def message_level(messages, rounds):
    """Alternate all sides for ``rounds`` rounds; print the table of median rounds."""
    sides = {"bare SimPy: link delay + Store put/get": lambda: bare_link_and_store(messages)}
    for runlog in (False, True):
        for case in CASES:
            name = f"{case}, {'RunLog' if runlog else 'counting log'}"
            sides[name] = lambda case=case, runlog=runlog: simulate_case(case, messages, runlog)
    sides["bare SimPy: timeouts (events)"] = lambda: bare_timeouts(4 * messages)
    seconds, counts, events = {name: [] for name in sides}, {}, {}
    for _ in range(rounds):
        for name, run in sides.items():
            gc.collect()
            t0 = perf_counter()
            counts[name], events[name] = run()
            seconds[name].append(perf_counter() - t0)
    wall = {name: float(np.median(s)) for name, s in seconds.items()}
    rate = {name: counts[name] / wall[name] for name in sides}
    bare = rate["bare SimPy: link delay + Store put/get"]
    print(
        f"1. Message level: {PAIRS} ping-pong pairs, {WORKERS} senders into one, ring allreduce "
        f"of {RING}; 32 B messages,"
    )
    print(
        f"   alpha {ALPHA_S * 1e6:g} us, beta {BETA_BPS / 1e9:g} GB/s; median of {rounds} "
        f"alternating round(s)"
    )
    print(
        f"{'case':<40} {'messages':>9} {'wall s':>7} {'messages/s':>11} {'vs bare':>8} "
        f"{'events/message':>15}"
    )
    for name in sides:
        if name.endswith("(events)"):
            continue
        per_message = f"{events[name] / counts[name]:.2f}" if events[name] else "-"
        print(
            f"{name:<40} {counts[name]:>9} {wall[name]:>7.3f} {rate[name]:>11,.0f} "
            f"{rate[name] / bare:>8.2f} {per_message:>15}"
        )
    events = rate["bare SimPy: timeouts (events)"]
    slowest = min((n for n in sides if n.endswith("RunLog")), key=rate.get)
    print(f"bare SimPy: {events:,.0f} timeout events/s ({1e6 / events:.2f} us each)")
    print(
        f"target >= {TARGET_RATE:,} messages/s and >= {TARGET_RATIO} x bare with bookkeeping on; "
        f"slowest such case ({slowest}): {rate[slowest]:,.0f}/s = {rate[slowest] / bare:.2f} x "
        f"bare = {rate[slowest] / TARGET_RATE:.2f} x the rate target"
    )
    return 1 / events


# -- 1b. instructions a message (valgrind) ------------------------------------------------------

INSTRUCTION_COUNTS = (2_000, 18_000)  # messages of the two runs whose difference is counted


def _instructions(case, messages, runlog):
    """CPU instructions of one subprocess that runs ``case`` (or the bare loop, ``bare``) for
    ``messages`` messages under cachegrind (no cache simulation)."""
    return _counted(
        f"s.bare_link_and_store({messages})"
        if case == "bare"
        else f"s.simulate_case({case!r}, {messages}, {runlog})"
    )


def _counted(call):
    """CPU instructions of one subprocess that runs ``call`` (Python, with this module as
    ``s``) under cachegrind (no cache simulation)."""
    code = "import sys; sys.path.insert(0, 'benchmarks'); import sim_speed as s; " + call
    env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="twinsgd-simspeed-") as folder:
        out = Path(folder) / "cachegrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                "--cache-sim=no",
                f"--cachegrind-out-file={out}",
                sys.executable,
                "-c",
                code,
            ],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        # the "summary:" line of cachegrind's file: the program's instructions (Ir)
        summary = next(line for line in out.read_text().splitlines() if line.startswith("summary:"))
    return int(summary.split()[1])


def instructions():
    """Print each case's instructions a message (RunLog and counting log) beside the bare
    loop's, counted over the difference of `INSTRUCTION_COUNTS` messages."""
    low, high = INSTRUCTION_COUNTS
    sides = [("bare SimPy: link delay + Store put/get", "bare", False)] + [
        (f"{case}, {'RunLog' if runlog else 'counting log'}", case, runlog)
        for runlog in (False, True)
        for case in CASES
    ]
    print(
        f"1. Message level, CPU instructions a message (valgrind: the runs of {high:,} and "
        f"{low:,} messages, their difference over {high - low:,})"
    )
    print(f"{'case':<40} {'instructions/message':>21} {'bare / this':>12}")
    with ThreadPoolExecutor(os.cpu_count()) as pool:  # the subprocesses side by side
        counts = {
            (case, runlog, n): pool.submit(_instructions, case, n, runlog)
            for _, case, runlog in sides
            for n in (low, high)
        }
        bare = None
        for name, case, runlog in sides:
            high_n, low_n = counts[case, runlog, high].result(), counts[case, runlog, low].result()
            per_message = (high_n - low_n) / (high - low)
            bare = bare or per_message
            print(f"{name:<40} {per_message:>21,.0f} {bare / per_message:>12.2f}")
    print(f"target: >= {TARGET_RATIO} x bare (in time) with bookkeeping on")
    node_step_instructions()


SCALE_NODES, SCALE_ITERATIONS = 10_000, (4, 8)  # scale (a)'s node-steps counted: the difference
SCALE_CLUSTERS = {  # scale (a)'s two clusters: name -> sim.run flags
    "2 us, 100 Gbit/s": "--latency 2us --bandwidth 100Gbps",
    "lomonosov-2-like": "--profile lomonosov-2-like",
}


def node_step_instructions():
    """Print scale (a)'s instructions a node-step, each command as typed (the analytic engine)
    and with ``--engine events``, beside the bare SimPy processes meeting at one event per
    step, over the difference of `SCALE_ITERATIONS`."""
    low, high = SCALE_ITERATIONS
    steps = SCALE_NODES * (high - low)
    sides = [("bare SimPy: one event a step", None)] + [
        (f"(a) {name}{label}", f"{flags}{engine}")
        for name, flags in SCALE_CLUSTERS.items()
        for label, engine in (("", ""), (", --engine events", " --engine events"))
    ]
    print(
        f"\n3a. Scale (a), CPU instructions a node-step (valgrind: {SCALE_NODES:,} nodes, "
        f"{high} and {low} iterations, their difference over {steps:,} node-steps)"
    )
    print(f"{'run':<48} {'instructions/node-step':>23} {'bare / this':>12}")
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        counts = {
            (name, it): pool.submit(
                _counted,
                f"s.bare_barriers({SCALE_NODES}, {it})"
                if flags is None
                else f"s.closed_form_run({SCALE_NODES}, {it}, {flags!r}, engine=None)",
            )
            for name, flags in sides
            for it in (low, high)
        }
        bare = None
        for name, _ in sides:
            per_step = (counts[name, high].result() - counts[name, low].result()) / steps
            bare = bare or per_step
            print(f"{name:<48} {per_step:>23,.0f} {bare / per_step:>12.2f}")


# -- 2. where the time goes ------------------------------------------------------------------------

GROUPS = ("SimPy core", "network model", "backend handlers", "node program", "bookkeeping")


def _group(func):
    """The group of a profiled function (filename, line, name); None for a builtin."""
    filename = func[0].replace(os.sep, "/")
    if filename == "~":
        return None
    if "/simpy/" in filename:
        return GROUPS[0]
    if filename.endswith("sim/network.py"):
        return GROUPS[1]
    if filename.endswith("sim/backend.py"):
        return GROUPS[2]
    if filename.endswith(("runlog.py", "runfolder.py", "/json/encoder.py", "/csv.py")):
        return GROUPS[4]
    return GROUPS[3]


def _main_caller_group(callers):
    """Where most of a builtin's time was spent from: its main caller's group (else SimPy's)."""
    caller = max(callers, key=lambda c: callers[c][2], default=None)
    return (_group(caller) if caller else None) or GROUPS[0]


def _profiled(run):
    """cProfile ``run()``: (pstats' stats, seconds profiled, own seconds by group)."""
    profiler = cProfile.Profile()
    profiler.enable()
    run()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # func -> (calls, ncalls, own s, cumulative s, callers)
    total = sum(own for _, _, own, _, _ in stats.values())
    groups = dict.fromkeys(GROUPS, 0.0)
    for func, (_, _, own, _, callers) in stats.items():
        if _group(func) is not None:
            groups[_group(func)] += own
            continue
        by_caller = {caller: c[2] for caller, c in callers.items()}  # builtin: own s per caller
        caller_own = sum(by_caller.values()) or 1.0
        for caller, caller_s in by_caller.items():
            groups[_group(caller) or GROUPS[0]] += own * caller_s / caller_own
    return stats, total, groups


def profile(title, run, top=12):
    """cProfile ``run()``; print the top functions and the groups' shares of own time."""
    stats, total, groups = _profiled(run)
    print(f"\n2. Where the time goes: cProfile over {title} ({total:.2f} s profiled)")
    print(f"{'function':<44} {'group':<26} {'calls':>8} {'own %':>6} {'cum. %':>7}")
    running = 0.0
    for func, (_, calls, own, _, callers) in sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]:
        running += own
        where = f"{Path(func[0]).name}:{func[1]}({func[2]})" if func[0] != "~" else func[2]
        group = _group(func) or f"[{_main_caller_group(callers)}]"
        print(
            f"{where[:44]:<44} {group:<26} {calls:>8} {100 * own / total:>6.1f} "
            f"{100 * running / total:>7.1f}"
        )
    print(
        "own time by group: " + ", ".join(f"{g} {100 * s / total:.0f}%" for g, s in groups.items())
    )


def profile_cases(messages):
    """Case by case, where a message's time goes with RunLog on: each case's own time by group
    per message, beside the bare loop's (all SimPy). The profiler slows every call alike, so
    read the shares and the ratios, not the microseconds."""
    rows = {"bare SimPy: link delay + Store put/get": lambda: bare_link_and_store(messages)}
    rows.update(
        {f"{case}, RunLog": lambda c=case: simulate_case(c, messages, True) for case in CASES}
    )
    print("\n2. Where the time goes, case by case: profiled us per message by group")
    print(f"{'case':<40} {'all':>6} " + " ".join(f"{g[:12]:>12}" for g in GROUPS))
    for name, run in rows.items():
        _, total, groups = _profiled(run)
        print(
            f"{name:<40} {1e6 * total / messages:>6.1f} "
            + " ".join(f"{1e6 * groups[g] / messages:>12.1f}" for g in GROUPS)
        )


def closed_form_run(nodes, iterations, cluster="--profile lomonosov-2-like", engine="events"):
    """Scale (a) in this process (`twinsgd.analysis.study.simulate_point`, which calls
    `sim.run.simulate`): ghost ResNet-50 allreduce, closed-form collectives, on ``cluster``
    (its flags), on ``engine`` (None: as typed, which runs the analytic engine)."""
    from twinsgd.analysis.study import simulate_point as simulate_run

    flags = (
        f"--iterations {iterations} --algorithm allreduce --allreduce ring --ghost resnet50 "
        f"--collectives closed-form {cluster}{f' --engine {engine}' if engine else ''}"
    ).split()
    with tempfile.TemporaryDirectory(prefix="twinsgd-simspeed-") as folder:
        simulate_run(nodes, flags, Path(folder) / "run")


def bare_barriers(nodes, iterations):
    """The SimPy floor of a closed-form step: ``nodes`` processes wait on one event per step,
    the last one in starts its timer (as `Simulator._allreduce_closed_form` does); seconds per
    node-step."""
    env, state = simpy.Environment(), {"in": 0}
    state["done"] = env.event()

    def node():
        for _ in range(iterations):
            state["in"] += 1
            done = state["done"]
            if state["in"] == nodes:
                state["in"], state["done"] = 0, env.event()
                env.timeout(1e-3).callbacks.append(lambda _, d=done: d.succeed(1e-3))
            yield done

    for _ in range(nodes):
        env.process(node())
    t0 = perf_counter()
    env.run()
    return (perf_counter() - t0) / (nodes * iterations)


# -- 3. scale --------------------------------------------------------------------------------------


def scale_runs(quick, profile_toml):
    """(name, nodes, iterations, sim.run argv, target wall s or None) of each scale run."""
    a_nodes, b_iters, real_nodes = (1000, 10, 42) if quick else (10_000, 100, 210)
    # issue 26's commands as a user types them: no sampling or evaluation flags
    allreduce = "--algorithm allreduce --allreduce ring --ghost resnet50 --collectives closed-form"
    gossip = ["--algorithm", "gossip", "--topology", "ring", "--steps-sample", "10"]
    runs = [  # as typed (the analytic engine, by --engine auto), and the events' closed form
        (
            f"(a) allreduce, ghost resnet50, {name}{' (events)' if engine else ''}",
            a_nodes,
            it,
            f"{allreduce} {flags}{engine}".split(),
            None if quick or it != 100 or engine else 10.0,
        )
        for name, flags in SCALE_CLUSTERS.items()
        for engine, its in (("", (100,)), (" --engine events", (20, 100)))
        for it in its
    ]
    analytic = [
        "--algorithm",
        "allreduce",
        "--ghost",
        "resnet50",
        "--network",
        "star",
        "--engine",
        "analytic",
        "--stragglers",
        "0.05:3x",
        "--speeds",
        "lognormal:0.2",
    ]
    runs += [
        (
            "(c) analytic engine, ghost resnet50",
            nodes,
            100,
            analytic,
            None if quick or nodes != 1_000_000 else 10.0,
        )
        for nodes in ((10_000,) if quick else (10_000, 1_000_000))
    ]
    runs.append(
        (
            "(b) gossip ring, ghost resnet18",
            210,
            b_iters,
            [*gossip, "--ghost", "resnet18"],
            None if quick else 60.0,
        )
    )
    runs.append(
        (
            "(b) gossip ring, MLP on mnist-subset",
            real_nodes,
            b_iters,
            [
                *gossip,
                "--dataset",
                "mnist-subset",
                "--batch-size",
                "16",
                "--compute",
                "profile",
                "--profile",
                str(profile_toml),
            ],
            None if quick else 60.0,
        )
    )
    return runs


def run_sim(nodes, iterations, argv, out):
    """``python -m sim.run`` in a subprocess: (wall s, CPU s, peak RSS MB, summary or error)."""
    cmd = [
        sys.executable,
        "-m",
        "sim.run",
        "--nodes",
        str(nodes),
        "--iterations",
        str(iterations),
        *argv,
        "--out",
        str(out),
    ]
    env = {
        **os.environ,
        "OPENBLAS_NUM_THREADS": "1",
        "TWINSGD_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    with tempfile.TemporaryFile() as stderr:
        t0 = perf_counter()
        child = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, not all children's
        wall = perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        stderr.seek(0)
        error = stderr.read().decode(errors="replace").strip().splitlines()[-1:]
    cpu, peak_mb = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux: KiB
    if child.returncode:
        return wall, cpu, peak_mb, f"exit {child.returncode}: {' '.join(error)}"
    return wall, cpu, peak_mb, json.loads((Path(out) / "summary.json").read_text())


def scale(quick, bare_event_s):
    """Run every scale case once; print the table and the memory check of (a)."""
    with tempfile.TemporaryDirectory(prefix="twinsgd-simspeed-") as folder:
        _scale(Path(folder), quick, bare_event_s)


def _scale(folder, quick, bare_event_s):
    toml = folder / "profile.toml"
    toml.write_text("[compute]\nseconds_per_sample = 1e-5\n")
    print(f"\n3. Scale: python -m sim.run, one subprocess each{' (--quick sizes)' * quick}")
    print(
        f"{'run':<48} {'nodes':>6} {'it':>4} {'wall s':>7} {'CPU s':>6} {'peak MB':>8} "
        f"{'us/node-step':>12} {'/ bare event':>12} {'target s':>8} {'wall/target':>11}"
    )
    peaks = {}
    for i, (name, nodes, iterations, argv, target) in enumerate(scale_runs(quick, toml)):
        wall, cpu, peak_mb, summary = run_sim(nodes, iterations, argv, folder / f"run{i}")
        if isinstance(summary, str):
            print(f"{name:<48} {nodes:>6} {iterations:>4} failed: {summary}")
            continue
        per_step = wall / (nodes * summary["iterations"])
        peaks[name, iterations] = peak_mb
        print(
            f"{name:<48} {nodes:>6} {iterations:>4} {wall:>7.1f} {cpu:>6.1f} {peak_mb:>8.0f} "
            f"{per_step * 1e6:>12.3g} {per_step / bare_event_s:>12.3g} "
            f"{target or '-':>8} {f'{wall / target:.2f}' if target else '-':>11}"
        )
    for name in sorted({name for name, _ in peaks if name.startswith("(a)")}):
        low, high = peaks.get((name, 20)), peaks.get((name, 100))
        if low and high:
            print(
                f"{name}: peak RSS at 20 and 100 iterations {low:.0f} MB and {high:.0f} MB "
                f"(ratio {high / low:.2f}; flat is 1.00)"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts: a smoke run")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="instead: the message-level cases' CPU instructions a message (needs valgrind)",
    )
    args = parser.parse_args(argv)
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("sim_speed: --instructions needs valgrind on the PATH")
        instructions()
        return
    messages, rounds = (5_000, 1) if args.quick else (20_000, 5)
    print(
        f"python {sys.version.split()[0]}, simpy {simpy.__version__}, numpy {np.__version__}, "
        f"orjson {orjson.__version__} (steps.csv's rows), {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    t0, cpu0 = perf_counter(), process_time()
    bare_event_s = message_level(messages, rounds)
    profile(
        "the RunLog cases", lambda: [simulate_case(c, messages // 2, runlog=True) for c in CASES]
    )
    profile_cases(messages // 2)
    nodes, iterations = (500, 10) if args.quick else (2000, 50)
    profile(
        f"closed form, ghost resnet50 allreduce, {nodes} nodes x {iterations} steps "
        f"(sim.run.simulate in process)",
        lambda: closed_form_run(nodes, iterations),
    )
    floor, t0 = bare_barriers(nodes, iterations), perf_counter()
    closed_form_run(nodes, iterations)
    ours = (perf_counter() - t0) / (nodes * iterations)
    print(
        f"closed form per node-step: {ours * 1e6:.2f} us, against {floor * 1e6:.2f} us for "
        f"bare SimPy processes meeting at one event per step ({ours / floor:.1f}x); the rest "
        f"is the node program, the driver and bookkeeping, shared out above"
    )
    scale(args.quick, bare_event_s)
    print(
        f"\nthis script: {perf_counter() - t0:.0f} s wall, {process_time() - cpu0:.0f} s CPU "
        f"in this process"
    )


if __name__ == "__main__":
    main()
