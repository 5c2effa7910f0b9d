"""What the notebooks in ``notebooks/`` share: run a configuration for real and simulated, and
end a study with its verdict table.

A study is a few runs of the command-line programs (``real.train`` under ``mpiexec`` or an
emulated cluster, ``sim.run`` on a calibrated profile), each writing a run folder, and a table
of the source study's claims beside our measured and simulated numbers. Measured runs are
subprocesses, so that a notebook measures exactly what a user's command would; simulated runs
call `sim.run.simulate` in this process.

``TWINSGD_SMOKE=1`` (set by the tests) shrinks every study to seconds: fewer iterations and
points, the same code path.
"""

import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from twinsgd.analysis.launch import default_launcher, launch_command

ROOT = Path(__file__).resolve().parents[2]
SMOKE = os.environ.get("TWINSGD_SMOKE") == "1"


def _env():
    """The programs' environment: one BLAS thread per rank, the project importable."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}


def _launch(ranks, cluster=False):
    """The launcher prefix for ``ranks`` processes: none for one, the emulated cluster's
    ``real.cluster run -n`` (one rank per emulated host), else ``TWINSGD_LAUNCHER`` (``srun
    --mpi=pmi2`` on an allocation) or the venv's ``mpiexec``, given ``-n ranks``."""
    if cluster:
        return [sys.executable, "-m", "real.cluster", "run", "-n", str(ranks), "--"]
    if ranks == 1:
        return []
    return launch_command(ranks, [], default_launcher())


@contextlib.contextmanager
def emulated_cluster(*flags):
    """An emulated cluster (root) for the block: ``python -m real.cluster hold FLAGS`` brings
    it up and takes it down when the pipe to its standard input closes, which this process
    does when the block ends and the kernel does when this process ends however it ends
    (SIGTERM, or SIGKILL as a test's timeout sends, where a ``finally`` never runs). The
    holder runs in a session of its own, so a signal to this process's group spares it."""
    holder = subprocess.Popen(
        [sys.executable, "-m", "real.cluster", "hold", *flags],
        cwd=ROOT,
        env=_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        if not holder.stdout.readline():  # its first status line: the cluster is up
            raise RuntimeError(
                f"python -m real.cluster hold {' '.join(flags)}: "
                f"{holder.stderr.read().decode().strip() or 'ended before the cluster was up'}"
            )
        yield
    finally:
        holder.stdin.close()  # down, now
        holder.wait(timeout=120)


def _run(cmd, timeout_s):
    done = subprocess.run(
        cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout_s
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {done.returncode}: "
            f"{done.stderr.strip().splitlines()[-1:] or ''}"
        )
    return done


def summary(folder):
    """A run folder's summary.json as a dict."""
    return json.loads((Path(folder) / "summary.json").read_text())


def measure(ranks, flags, out, cluster=False, timeout_s=1800):
    """``real.train flags`` on ``ranks`` processes into run folder ``out``; its summary."""
    shutil.rmtree(out, ignore_errors=True)
    _run(
        [
            *_launch(ranks, cluster),
            sys.executable,
            "-m",
            "real.train",
            "--no-progress",
            "--out",
            str(out),
            *flags,
        ],
        timeout_s,
    )
    return summary(out)


def simulate_point(nodes, flags, out):
    """``sim.run --nodes nodes flags`` into run folder ``out``, in this process
    (`sim.run.simulate`: a simulated time does not depend on what else the process holds); its
    summary. ValueError for flags sim.run refuses."""
    from sim.run import build_parser
    from sim.run import simulate as simulate_run
    from twinsgd.cli import CheckingParser
    from twinsgd.run.config import parse_command

    shutil.rmtree(out, ignore_errors=True)
    argv = ["--no-progress", "--nodes", str(nodes), "--out", str(out), *flags]
    return simulate_run(*parse_command(argv, build_parser(CheckingParser)), say=lambda _: None)


def calibrate(out, cluster=False, timeout_s=600, models="mlp", data=()):
    """Measure this machine (or the emulated cluster) on 2 ranks into profile ``out``
    (``real.calibrate --quick --models models``: the step times ``--compute empirical`` draws
    from are those of ``models``, comma-separated, timed on ``data``, the runs' ``--dataset``
    and ``--data-dir`` flags: a cnn's step on CIFAR's 32x32x3 is not its step on the bundled
    MNIST); its path."""
    _run(
        [
            *_launch(2, cluster),
            sys.executable,
            "-m",
            "real.calibrate",
            "--quick",
            "--models",
            models,
            *data,
            "--out",
            str(out),
        ],
        timeout_s,
    )
    return Path(out)


def lomonosov_configurations(threshold):
    """The Lomonosov-2 study's ten configurations as (name, flags): Local-SGD(p) over allreduce,
    over gossip with partners at a rotating distance, and over that gossip with threshold
    sparsification at ``threshold`` (CHOCO per edge: values whose magnitude is below it are not
    sent); and Local-SGD(32) over allreduce."""
    gossip = ["--algorithm", "gossip", "--topology", "rotating"]
    return [
        *((f"Local-SGD({p}), allreduce", ["--algorithm", "allreduce", "--local-steps", p])
          for p in ("1", "4", "16")),
        *((f"Local-SGD({p}), gossip", [*gossip, "--local-steps", p]) for p in ("1", "4", "16")),
        *((f"Local-SGD({p}), gossip + threshold",
           [*gossip, "--local-steps", p, "--compress", f"threshold:{threshold}"])
          for p in ("1", "4", "16")),
        ("Local-SGD(32), allreduce", ["--algorithm", "allreduce", "--local-steps", "32"]),
    ]  # fmt: skip


# The ten with the MNIST MLP's threshold (notebook 3's quick variant, the benchmarks): 0.01 drops
# about 99 % of that MLP's values at the first step
LOMONOSOV_CONFIGURATIONS = lomonosov_configurations("0.01")


def cifar10_data(work):
    """``--dataset``/``--data-dir`` flags for CIFAR-10-format runs, and the data set's name: the
    real CIFAR-10 where ``TWINSGD_DATA`` holds its binaries, else `twinsgd.data.substitute`'s
    Fashion-MNIST in CIFAR-10's format, written under folder ``work`` (about 185 MB)."""
    from twinsgd.data.locations import SUBSTITUTE_NAME, env_data_dir, find_files
    from twinsgd.data.substitute import write_substitute

    root = env_data_dir()
    if root is not None and any(find_files("cifar10", d) for d in (root / "cifar10", root)):
        return ["--dataset", "cifar10", "--data-dir", str(root)], "cifar10"
    out = write_substitute(Path(work) / SUBSTITUTE_NAME, root)
    return ["--dataset", "cifar10", "--data-dir", str(out)], SUBSTITUTE_NAME


def simulate_points(points, workers=None):
    """`simulate_point` for each (nodes, flags, out) of ``points``, on a pool of ``workers``
    processes (default: this machine's cores; 1: in this process); their summaries, in order.
    A simulated time does not depend on the process that computed it, only the wall time does."""
    points = list(points)
    workers = workers or os.cpu_count() or 1
    if workers == 1 or len(points) < 2:
        return [simulate_point(*p) for p in points]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(min(workers, len(points))) as pool:
        return list(pool.map(simulate_point, *zip(*points, strict=True)))


@dataclass
class Verdict:
    """One claim of a source study beside our numbers."""

    claim: str
    measured: str
    simulated: str
    reproduced: str  # "yes", "no" or "partly"
    why: str


def verdict_table(verdicts):
    """The Markdown table that ends every notebook."""
    rows = [
        "| the study's claim | measured | simulated | reproduced | why |",
        "|---|---|---|---|---|",
    ]
    rows += [
        f"| {v.claim} | {v.measured} | {v.simulated} | {v.reproduced} | {v.why} |" for v in verdicts
    ]
    return "\n".join(rows)


def markdown(header, rows):
    """A Markdown table of ``rows`` (sequences of cells) under ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def figure(kind, runs, out, **options):
    """Draw `twinsgd.analysis.plot`'s figure ``kind`` of labelled runs into file ``out`` (made
    with its folder); returns the numbers drawn.

    ``runs``: {label: run folder}, or for ``predicted`` {label: (measured, simulated) folders};
    the label names the run in the figure instead of its folder's name. ``options``: `plot`'s
    (``target``, ``band``, ``steps``)."""
    from twinsgd.analysis.plot import Run, plot

    def named(folder, label):
        run = Run(folder)
        run.name = label
        return run

    if kind == "predicted":
        drawn = [(named(m, label), named(s, label)) for label, (m, s) in runs.items()]
    else:
        drawn = [named(folder, label) for label, folder in runs.items()]
    return plot(kind, drawn, out, **options)


def figures_folder(work):
    """Where a notebook draws its figures: ``$TWINSGD_FIGURES`` if set, else its run folders'."""
    return Path(os.environ.get("TWINSGD_FIGURES") or work)


def iterations_to_target(folder, target):
    """The first evaluated iteration of run ``folder`` whose test accuracy reaches ``target``
    (a fraction), or None: metrics.csv's rows in order."""
    with open(Path(folder) / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["test_accuracy"] and float(row["test_accuracy"]) >= target:
                return int(row["iteration"])
    return None


def time_to_accuracy(folder, accuracy):
    """The time (seconds, the run's clock) of the first evaluation of run ``folder`` whose test
    accuracy reaches ``accuracy`` (a fraction), or None: metrics.csv's rows in order."""
    with open(Path(folder) / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["test_accuracy"] and float(row["test_accuracy"]) >= accuracy:
                return float(row["time_s"])
    return None
