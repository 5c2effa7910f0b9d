"""``python -m sim.sweep``: a grid of simulated runs in parallel, one run folder per point, one CSV.

Examples
--------
::

    python -m sim.sweep --out runs/sweep1 --grid nodes=4,8,16 --grid latency=5us,50us \\
        --grid algorithm=allreduce,gossip -- --dataset mnist --iterations 200
    python -m sim.sweep --out runs/ef --grid compress=topk:0.01,sign \\
        --grid error-feedback=true,false --workers 4 -- --algorithm allreduce --nodes 8
    mpiexec -n 65 python -m mpi4py.futures -m sim.sweep --out runs/big \\
        --grid nodes=64,256,1024 -- --collectives closed-form --compute profile --profile P.toml

Each ``--grid NAME=V1,V2,...`` names a ``sim.run`` flag without its dashes; the points are the
Cartesian product of the value lists, the first ``--grid`` varying slowest. A flag that takes no
value (``--error-feedback``) is gridded over ``true,false``. Everything after ``--`` goes to every
point unchanged. Point ``nodes=4_latency=5us`` runs ``sim.run`` with ``--nodes=4 --latency=5us``,
the shared flags and ``--out OUT/nodes=4_latency=5us``; in folder names, characters other than
letters, digits and ``.-+=:@%`` become ``_``.

``OUT/sweep.csv`` has one row per finished point, in grid order: the grid values, then ``status``
(``done`` or ``failed: <why>``) and the totals of the point's summary.json (`SUMMARY_COLUMNS`; a
grid column of the same name, such as ``nodes``, stands for both), then ``run``, the point's folder
relative to OUT. It is rewritten atomically after each point, so a killed sweep keeps what is done.
One line per finished point goes to stderr.

Where the points run (``--executor``): ``process`` is a local `ProcessPoolExecutor` of ``--workers``
processes (default: one per CPU) started with "spawn", so no worker inherits the parent's numpy/BLAS
state; ``mpi`` is `mpi4py.futures.MPIPoolExecutor`. ``auto`` (the default) picks ``mpi`` when
``python -m mpi4py.futures`` is running the sweep with workers beside it: that runner imports
``mpi4py.futures`` before it runs the module (nothing else in the sweep does, and mpi4py is imported
only then) and MPI's world has more than one process. Its pool is then every rank but rank 0, which
runs the sweep, whatever ``--workers`` says. Each point's BLAS uses one thread unless
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS or MKL_NUM_THREADS say otherwise. Points run side by side, so
with ``--compute measured`` (sim.run's default) each one times its kernels on a busy machine; for
compute times independent of the sweep use ``--compute profile``, or ``--workers 1``.

Exit status: 0 every point done; 3 some point failed (its row says why; the others still ran);
2 bad sweep input (one line on stderr, no traceback); 130 interrupted (Ctrl-C: the running points
stop, the queued ones never start, sweep.csv holds the finished ones).
"""

import concurrent.futures
import contextlib
import csv
import io
import itertools
import json
import logging
import multiprocessing
import os
import re
import sys
import tempfile
from pathlib import Path

from twinsgd.cli import CheckingParser, OneLineParser
from twinsgd.run.config import option_actions, parse_command

logger = logging.getLogger(__name__)

SUMMARY_COLUMNS = (
    "status",
    "nodes",
    "iterations",
    "time_s",
    "compute_s",
    "comm_s",
    "wait_s",
    "seconds_per_epoch",
    "iterations_per_s",
    "bytes_sent",
    "bytes_per_iteration",
    "final_test_accuracy",
    "final_test_loss",
)
BOOLEAN_VALUES = {"true": True, "false": False}
SWEEP_OWNS = ("out",)  # sim.run flags the sweep sets itself
_UNSAFE_IN_FOLDER_NAME = re.compile(r"[^\w.+=:@%-]")
_SIM_RUN_ERROR = "python -m sim.run: error: "
_BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def build_parser():
    parser = OneLineParser(
        prog="python -m sim.sweep",
        usage="%(prog)s --out OUT --grid NAME=V1,V2,... [--grid ...] [--workers N] "
        "[--executor auto|process|mpi] [-- SIM_RUN_FLAGS ...]",
        description="Run sim.run on every point of a grid, in parallel; write one "
        "run folder per point and OUT/sweep.csv.",
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="OUT",
        help="sweep folder: OUT/<point>/ run folders and OUT/sweep.csv",
    )
    parser.add_argument(
        "--grid",
        action="append",
        required=True,
        metavar="NAME=V1,V2,...",
        help="a sim.run flag (without dashes) and its values; repeat for more "
        "axes, the first varying slowest",
    )
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="points run at once (default: one per CPU; under python -m "
        "mpi4py.futures every rank but 0 runs points, whatever N)",
    )
    parser.add_argument(
        "--executor",
        choices=("auto", "process", "mpi"),
        default="auto",
        help="local process pool or mpi4py.futures (auto: mpi when started by "
        "python -m mpi4py.futures on more than one process)",
    )
    return parser


def sim_run_flags():
    """``sim.run``'s long flags but ``--help``: ``{name without dashes: True if it takes a value}``.

    A flag with a ``--no-`` twin (``--error-feedback``/``--no-error-feedback``) is one entry.
    """
    from sim.run import build_parser as build_sim_run_parser

    flags = {}
    for action in option_actions(build_sim_run_parser()).values():
        names = [s.removeprefix("--") for s in action.option_strings if s.startswith("--")]
        if names:
            flags[names[0]] = action.nargs != 0  # --x/--no-x (BooleanOptionalAction): nargs 0
    return flags


def parse_grid(specs, flags):
    """Read ``--grid NAME=V1,V2,...`` specs into ``[(name, [values])]``; ValueError on bad input.

    ``flags`` is `sim_run_flags()`. Values of a flag that takes none must be ``true`` or ``false``.

    Examples
    --------
    >>> parse_grid(["nodes=4,8", "error-feedback=true,false"], {"nodes": True,
    ...                                                         "error-feedback": False})
    [('nodes', ['4', '8']), ('error-feedback', ['true', 'false'])]
    """
    grid = []
    for spec in specs:
        name, equals, listed = spec.partition("=")
        values = listed.split(",")
        if not equals or not name:
            raise ValueError(f"--grid {spec}: expected NAME=V1,V2,...")
        _check_grid_name(spec, name, flags, [n for n, _ in grid])
        if not all(values):
            raise ValueError(f"--grid {spec}: empty value in the list")
        if not flags[name] and not all(v.lower() in BOOLEAN_VALUES for v in values):
            raise ValueError(f"--grid {spec}: --{name} takes no value; grid it over true,false")
        _check_folder_names_differ(spec, values)
        grid.append((name, values))
    return grid


def _check_grid_name(spec, name, flags, earlier):
    if name.startswith("-"):
        raise ValueError(f"--grid {spec}: give the flag name without dashes")
    if name in SWEEP_OWNS:
        raise ValueError(f"--grid {spec}: the sweep sets --{name} of each point itself")
    if name not in flags:
        raise ValueError(f"--grid {spec}: sim.run has no flag --{name}")
    if name in earlier:
        raise ValueError(f"--grid {spec}: {name} is already gridded")


def _check_folder_names_differ(spec, values):
    seen = {}
    for value in values:
        safe = folder_safe(value)
        if safe in seen:
            raise ValueError(
                f"--grid {spec}: values {seen[safe]!r} and {value!r} give the same folder name"
            )
        seen[safe] = value


def check_shared_flags(shared, grid, flags):
    """Check the flags given after ``--``: known to sim.run, not set by the sweep, not gridded.

    Flags are matched by their full names (sim.run would accept abbreviations; the sweep does
    not, so that a gridded flag cannot hide behind one). ValueError on a bad flag.
    """
    gridded = {name for name, _ in grid}
    for token in shared:
        if not token.startswith("--"):
            continue
        name = token.removeprefix("--").partition("=")[0]
        if name.startswith("no-") and flags.get(name.removeprefix("no-")) is False:
            name = name.removeprefix("no-")
        if name in SWEEP_OWNS:
            raise ValueError(f"{token} after --: the sweep sets --{name} of each point itself")
        if name not in flags:
            raise ValueError(f"{token} after --: sim.run has no flag --{name}")
        if name in gridded:
            raise ValueError(f"--{name} is both in --grid and after --")


def expand_grid(grid):
    """The points of a grid: one ``{name: value}`` per combination, the first axis slowest.

    Examples
    --------
    >>> expand_grid([("nodes", ["4", "8"]), ("seed", ["0"])])
    [{'nodes': '4', 'seed': '0'}, {'nodes': '8', 'seed': '0'}]
    >>> [point_name(p) for p in expand_grid([("nodes", ["4", "8"]), ("seed", ["0", "1"])])]
    ['nodes=4_seed=0', 'nodes=4_seed=1', 'nodes=8_seed=0', 'nodes=8_seed=1']
    """
    names = [name for name, _ in grid]
    return [
        dict(zip(names, combination, strict=True))
        for combination in itertools.product(*(values for _, values in grid))
    ]


def folder_safe(value):
    """``value`` with every character unsafe in a folder name replaced by ``_``.

    >>> folder_safe("graphs/my ring.txt")
    'graphs_my_ring.txt'
    """
    return _UNSAFE_IN_FOLDER_NAME.sub("_", value)


def point_name(point):
    """The point's folder name, readable and unique within its grid.

    >>> point_name({"nodes": "4", "topology": "random-regular:3"})
    'nodes=4_topology=random-regular:3'
    """
    return "_".join(f"{name}={folder_safe(value)}" for name, value in point.items())


def point_argv(point, shared, run_dir, flags):
    """The ``sim.run`` command line of one point: its grid flags, the shared ones, its ``--out``.

    >>> point_argv({"nodes": "4", "error-feedback": "false"}, ["--iterations", "3"], "o/p",
    ...            {"nodes": True, "error-feedback": False})
    ['--nodes=4', '--no-error-feedback', '--iterations', '3', '--out', 'o/p']
    """
    gridded = []
    for name, value in point.items():
        if flags[name]:
            gridded.append(f"--{name}={value}")  # "=": a value may start with "-"
        else:
            gridded.append(f"--{name}" if BOOLEAN_VALUES[value.lower()] else f"--no-{name}")
    return [*gridded, *shared, "--out", str(run_dir)]


def run_point(argv):
    """Simulate one point, ``sim.run``'s command line ``argv``, in this process
    (`sim.run.prepare_simulation`, then `sim.run.run_simulation`: so a ValueError is bad input
    only when the preparation raises it) and report how it went; never raises an Exception.

    Its printing is captured (the last line explains a refusal). Returns ``{"status": "done" or
    "failed: <one line>", "summary": summary.json as a dict, or None when the run wrote none}``.
    Runs in a worker process: the sweep's executor calls it.
    """
    for variable in _BLAS_THREADS:
        os.environ.setdefault(variable, "1")  # only takes effect before numpy's first import
    from sim import run as sim_run
    from twinsgd.data import DataError

    printed = io.StringIO()
    with (
        _as_command_line(argv),
        contextlib.redirect_stdout(printed),
        contextlib.redirect_stderr(printed),
    ):
        try:
            prepared = sim_run.prepare_simulation(*parse_command(argv, sim_run.build_parser()))
        except SystemExit as stop:  # refused as it was parsed: the parser's line says why
            return _refused(stop.code, printed.getvalue())
        except (DataError, ValueError) as err:  # bad input
            return {"status": f"failed: {_one_line(str(err))}", "summary": None}
        except Exception as err:
            return _crashed(err)
        try:
            summary = sim_run.run_simulation(prepared)
        except sim_run.RunStopped:  # stopped at a fault: its folder says so
            summary = _read_summary(prepared.folder.path)
            return {"status": summary["status"] if summary else "failed", "summary": summary}
        except Exception as err:
            return _crashed(err)
    return {"status": summary.get("status", "done"), "summary": summary}


def _crashed(err):
    """The status of a point that raised ``err`` (a bug): its type and message in one line."""
    return {"status": f"failed: {_one_line(f'{type(err).__name__}: {err}')}", "summary": None}


@contextlib.contextmanager
def _as_command_line(argv):
    """Make ``sys.argv`` the point's, so its config.json records the command that reruns it."""
    saved = sys.argv
    sys.argv = [saved[0] if saved else "sim.run", *argv]
    try:
        yield
    finally:
        sys.argv = saved


def _refused(code, printed):
    """The status of a point its parser refused (exit ``code``), from the last line printed."""
    lines = [line for line in printed.splitlines() if line.strip()]
    why = lines[-1].removeprefix(_SIM_RUN_ERROR) if lines else f"exit status {code}"
    return {"status": f"failed: {_one_line(why)}", "summary": None}


def _read_summary(run_dir):
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def _one_line(text):
    return " ".join(text.split())


def csv_columns(grid):
    """sweep.csv's header: the grid names, the summary columns not among them, ``run``."""
    names = [name for name, _ in grid]
    return [*names, *(c for c in SUMMARY_COLUMNS if c not in names), "run"]


def csv_row(point, outcome, name):
    """One sweep.csv row (a dict by column) for a finished point."""
    summary = outcome["summary"] or {}
    measured = {c: summary.get(c) for c in SUMMARY_COLUMNS}
    return {**measured, **point, "status": outcome["status"], "run": name}


def write_csv(path, columns, rows):
    """Replace ``path`` with a CSV of ``rows`` (dicts; None is an empty field), atomically."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            writer = csv.DictWriter(fh, columns, restval="", extrasaction="ignore")
            writer.writeheader()
            writer.writerows({c: "" if v is None else v for c, v in row.items()} for row in rows)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def progress_line(done, total, name, outcome):
    """``[3/8] nodes=8_latency=5us: 1.23 simulated s, 91.2%`` (or the failure)."""
    summary = outcome["summary"] or {}
    if outcome["status"] != "done":
        return f"[{done}/{total}] {name}: {outcome['status']}"
    accuracy = summary.get("final_test_accuracy")
    shown = "not evaluated" if accuracy is None else f"{100 * accuracy:.1f}%"
    return f"[{done}/{total}] {name}: {summary.get('time_s', 0):.3g} simulated s, {shown}"


def mpi4py_futures_workers():
    """How many workers ``python -m mpi4py.futures`` started beside this process (0: not run so).

    That runner imports ``mpi4py.futures`` before it runs the sweep module, which never imports
    it itself; mpi4py is imported here only in that case, to ask MPI's world size (every rank but
    rank 0, which runs the sweep, is a worker).
    """
    if "mpi4py.futures" not in sys.modules:
        return 0
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_size() - 1


def make_executor(kind, workers, points):
    """The executor ``--executor kind`` names: ``(executor, slots, description)``.

    ``slots`` is how many points it runs at once; the description goes into the opening line.
    """
    mpi_workers = mpi4py_futures_workers()
    if kind == "auto":
        kind = "mpi" if mpi_workers > 0 else "process"
    slots = min(workers or os.cpu_count() or 1, points)
    if kind == "mpi":
        from mpi4py.futures import MPIPoolExecutor

        if mpi_workers:  # python -m mpi4py.futures: the pool is every rank but 0, whatever N
            return MPIPoolExecutor(), mpi_workers, f"{mpi_workers} MPI rank(s) (mpi4py.futures)"
        return (
            MPIPoolExecutor(max_workers=slots),
            slots,
            f"{slots} spawned MPI process(es) (mpi4py.futures)",
        )
    spawn = multiprocessing.get_context("spawn")  # not fork: numpy/BLAS state does not fork well
    return (
        concurrent.futures.ProcessPoolExecutor(max_workers=slots, mp_context=spawn),
        slots,
        f"{slots} local worker process(es)",
    )


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args, unknown = parser.parse_known_args(argv[:cut])
    shared = argv[cut + 1 :]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)} (sim.run flags go after --)")
    if args.workers is not None and args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    flags = sim_run_flags()
    try:
        grid = parse_grid(args.grid, flags)
        check_shared_flags(shared, grid, flags)
    except ValueError as err:
        parser.error(str(err))
    out = Path(args.out)
    for point in expand_grid(grid):  # bad input is the sweep's, found before any point runs
        name = point_name(point)
        problem = refused(point_argv(point, shared, out / name, flags))
        if problem:
            parser.error(f"point {name}: {problem}")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        parser.error(f"--out {out}: cannot create the sweep folder ({err.strerror})")
    return _sweep(grid, shared, flags, out, args.executor, args.workers)


def refused(argv):
    """Why ``sim.run`` would refuse ``argv`` as it parses it (a flag's type or choices, a rule
    of the run configuration), or None: checked for every point before any runs."""
    from sim.run import build_parser as build_sim_run_parser

    try:
        parse_command(argv, build_sim_run_parser(CheckingParser))
    except ValueError as err:
        return str(err)
    return None


def _sweep(grid, shared, flags, out, executor_kind, workers):
    """Run every point, rewriting OUT/sweep.csv as each finishes; 0 if all are done, else 3."""
    points = expand_grid(grid)
    names = [point_name(p) for p in points]
    argvs = [point_argv(p, shared, out / n, flags) for p, n in zip(points, names, strict=True)]
    columns, csv_path = csv_columns(grid), out / "sweep.csv"
    write_csv(csv_path, columns, [])
    executor, slots, description = make_executor(executor_kind, workers, len(points))
    logger.info(f"{len(points)} points on {description}, results in {csv_path}")
    rows = {}
    try:
        for i, outcome in _finished_points(executor, slots, argvs):
            rows[i] = csv_row(points[i], outcome, names[i])
            write_csv(csv_path, columns, [rows[k] for k in sorted(rows)])
            logger.info(progress_line(len(rows), len(points), names[i], outcome))
    except KeyboardInterrupt:
        logger.error(f"interrupted, {len(rows)} of {len(points)} points in {csv_path}")
        return 130
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    failed = sum(row["status"] != "done" for row in rows.values())
    print(f"sweep: {len(points) - failed} done, {failed} failed, {csv_path}")
    return 3 if failed else 0


def _finished_points(executor, slots, argvs):
    """Run `run_point` on each argv; yield ``(index, outcome)`` as each point finishes.

    NOTE: no more than ``slots`` points are submitted at a time, so none waits in the executor's
    queue (whose calls cannot be cancelled): an interrupted sweep ends with its running points.
    """
    waiting, running = iter(enumerate(argvs)), {}
    while True:
        while len(running) < slots and (job := next(waiting, None)) is not None:
            running[executor.submit(run_point, job[1])] = job[0]
        if not running:
            return
        finished, _ = concurrent.futures.wait(
            running, return_when=concurrent.futures.FIRST_COMPLETED
        )
        for future in finished:
            yield running.pop(future), _outcome_of(future)


def _outcome_of(future):
    """The future's `run_point` result; a worker that died (killed, out of memory) is a failure."""
    try:
        return future.result()
    except Exception as err:
        return {"status": f"failed: {_one_line(f'{type(err).__name__}: {err}')}", "summary": None}


if __name__ == "__main__":
    sys.exit(main())
