"""``python -m twinsgd.analysis.validate``: how far the simulator's prediction is from the
measurement.

A matrix of configurations (`CONFIGS`) is trained for real, ``--repeats`` times each, in
passes (the first run of every cell, then the second, ...: a machine whose speed drifts, as
this one does by up to 2.5x for minutes, spreads that over every cell and into the spread
column rather than onto one cell's repeats), and simulated once on a profile calibrated on 2
hosts of the same network. One row per network x
configuration x hosts: the measured median time per iteration (ms), the spread of the repeats
((max - min) / median, %), the simulated time per iteration, the error ((sim - measured) /
measured, %), and the errors of compute and comm per iteration (%) and of wait (sim - measured,
ms: the measured wait may be ~0). Then per network the median and worst |error|, apart for the
rows at the calibration's host count (2) and the extrapolated ones (calibrated on 2 hosts only,
predict 4; and each host count apart where there are several), and the targets, each "met" or
"missed".

Examples
--------
::

    python -m twinsgd.analysis.validate --networks shm --configs allreduce-ring,ps-sync --hosts 2
    python -m twinsgd.analysis.validate              # as root: shm, 1Gbit and 100Mbit emulated
    python -m twinsgd.analysis.validate --quick      # CI: 3 configs, 2 hosts, 1 repeat
    python -m twinsgd.analysis.validate --from runs/validate   # the table again, nothing run

Networks: ``shm`` is ``mpiexec -n H`` on this machine (shared memory), or ``--launcher "CMD"``
(``CMD -n H``: ``srun --mpi=pmi2`` measures an allocation's own network under that name); a
rate such as ``1Gbit`` is an emulated cluster (``python -m real.cluster up --hosts 4
--bandwidth 1Gbit``), brought up for that network and taken down in a ``finally`` (Ctrl-C too);
only root can build one, so without root the emulated networks are skipped with one line.
Everything runs one after the other (a measurement never shares the cores with another one),
each subprocess with a timeout.

Run folders (``--out DIR``): ``DIR/NET/profile.toml`` (``real.calibrate --models mlp`` on 2
hosts), ``DIR/NET/CONFIG-H/real-K`` (``real.train``), ``DIR/NET/CONFIG-H/sim`` (``sim.run
--compute empirical``), each command's output in a ``.log`` beside its folder, and
``DIR/NET/CONFIG-H/row.json`` (the cell, its commands, and "ok", "not run: ..." or "failed:
..."). ``DIR/validation.md`` is what is printed, the machine's speed last (a gradient's median
in each window of the calibration and in the runs at 2 hosts: `machine_speed`; and in each
row at 2 hosts, its runs' gradient against the calibration's: `gradient_vs_calibration_pct`);
``DIR/validation.csv`` has every number of every row (`CSV_COLUMNS`), ``DIR/own-code.md``
each cell's compute piece by piece (`own_code.cells_text`). ``--from DIR`` rebuilds them from
the run folders alone.

The machine's phase (`real.phase`: this machine copies through memory at two speeds, 3x apart,
and switches by itself) is probed before and after the calibration (``DIR/NET/phase.json``) and
after each real run (``row.json``'s ``phase_us``); a row is "held" where its calibration's and
its runs' probes are within 1.5x of each other, else "moved" (`phase_held`), and the summary
gives the rows that held apart where any moved: a row that moved is off by the machine.

Every run gets ``--dataset mnist-subset`` (what the default ``mnist`` falls back to offline,
named so that no front end tries a download) and TWINSGD_OFFLINE=1, OPENBLAS_NUM_THREADS=1.

Exit status: 0 the table was made (targets missed or not); 2 bad input (one line on stderr, no
traceback); 128+N stopped by signal N (Ctrl-C, SIGTERM, SIGHUP: the running command gets SIGINT,
an emulated cluster is taken down, no table is written).
"""

import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from twinsgd.analysis import prediction_table
from twinsgd.analysis.launch import default_launcher, launch_command, parse_launcher
from twinsgd.analysis.prediction_table import (  # noqa: F401 (the table is this command's too)
    CALIBRATION_HOSTS,
    CSV_COLUMNS,
    machine_speed,
    networks_of,
    phase_held,
    read_cell,
    render,
    row_numbers,
    summary,
    table,
    targets,
    write_outputs,
)
from twinsgd.cli import OneLineParser

logger = logging.getLogger(__name__)

CONFIGS = {  # name -> real.train / sim.run flags
    "allreduce-ring": ("--algorithm", "allreduce", "--allreduce", "ring"),
    "allreduce-mpi": ("--algorithm", "allreduce", "--allreduce", "mpi"),
    "ps-sync": ("--algorithm", "ps", "--mode", "sync"),
    "ps-async": ("--algorithm", "ps", "--mode", "async"),
    "ssp-2": ("--algorithm", "ps", "--mode", "ssp", "--staleness", "2"),
    "gossip-ring": ("--algorithm", "gossip", "--topology", "ring"),
    "local-sgd-4": ("--algorithm", "allreduce", "--local-steps", "4"),
    "topk-ef": ("--algorithm", "allreduce", "--compress", "topk:0.01", "--error-feedback"),
}
NETWORKS = ("shm", "1Gbit", "100Mbit")
QUICK = {
    "iterations": 60,
    "repeats": 1,
    "configs": ("allreduce-ring", "ps-sync", "gossip-ring"),
    "hosts": (2,),
}
ENV = {"TWINSGD_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1"}
CLUSTER_TIMEOUT_S = 120.0  # real.cluster up / down
CALIBRATION_TIMEOUT_S = {False: 1800.0, True: 600.0}  # by --quick
STOP_GRACE_S = 10.0  # after SIGINT to a timed-out or interrupted run, SIGKILL this much later
PHASE_TIMEOUT_S = 60.0  # a probe of the machine's phase (real.phase) takes about a second


# -- the matrix ----------------------------------------------------------------------------------


def matrix(configs=tuple(CONFIGS), hosts=(2, 4), networks=NETWORKS):
    """The cells to measure, in the table's order: dicts of network, config, hosts and flags.

    Examples
    --------
    >>> [(c["network"], c["config"], c["hosts"]) for c in matrix(["ps-sync"], [4, 2], ["shm"])]
    [('shm', 'ps-sync', 2), ('shm', 'ps-sync', 4)]
    >>> matrix(["ssp-2"], [2], ["1Gbit"])[0]["flags"]
    ('--algorithm', 'ps', '--mode', 'ssp', '--staleness', '2')
    """
    unknown = [name for name in configs if name not in CONFIGS]
    if unknown:
        raise ValueError(f"unknown configuration {unknown[0]!r} (known: {', '.join(CONFIGS)})")
    cells = [
        {"network": net, "config": name, "hosts": h, "flags": CONFIGS[name]}
        for net in networks
        for name in configs
        for h in hosts
    ]
    return sorted(cells, key=_order)


def _order(cell):
    """Sort key: shm first, then faster networks; the configurations in `CONFIGS`' order."""
    net, name = cell["network"], cell["config"]
    known = list(CONFIGS)
    try:
        rank = (0, 0.0) if net == "shm" else (1, -network_rate_Bps(net))
    except ValueError:  # a name no longer understood, read by --from
        rank = (2, 0.0)
    return (*rank, net, known.index(name) if name in known else len(known), name, cell["hosts"])


def network_rate_Bps(text):
    """Bytes/s of an emulated network's rate: tc's ``1Gbit``, or ``1Gbps``, ``125MB/s``.

    >>> network_rate_Bps("100Mbit"), network_rate_Bps("1Gbps")
    (12500000.0, 125000000.0)
    """
    from twinsgd.run.units import parse_tc_rate_Bps

    rate_Bps = parse_tc_rate_Bps(text)
    if not rate_Bps > 0:
        raise ValueError(f"network rate {text!r} must be > 0")
    return rate_Bps


def read_rows(folder):
    """The rows of every cell under ``folder``, in the table's order (`matrix`'s)."""
    return prediction_table.read_rows(folder, _order)


def train_flags(cell, iterations):
    """The flags both real.train and sim.run get for ``cell``."""
    return [
        *cell["flags"],
        "--iterations",
        str(iterations),
        "--eval-every",
        str(iterations),
        "--no-progress",
        "--seed",
        "0",
        "--dataset",
        "mnist-subset",
    ]


# -- running the matrix --------------------------------------------------------------------------


def run_matrix(
    cells, out, iterations, repeats, quick=False, timeout_s=None, say=print, launcher=None
):
    """Calibrate each network of ``cells``, run its cells, and return the rows (`read_cell`).
    ``shm`` runs start through ``launcher`` (an argv prefix; None: the venv's mpiexec).

    Sequential: one measurement at a time. An emulated network's cluster comes up before its
    calibration and goes down after its last cell, also on an error or Ctrl-C (re-raised).
    """
    timeout_s = timeout_s or 120.0 + iterations
    rows = []
    for net in networks_of(cells):
        mine = [c for c in cells if c["network"] == net]
        net_dir = Path(out) / _folder_name(net)
        if net == "shm":
            launch = functools.partial(launch_command, launcher=launcher)
            _run_network(mine, net_dir, launch, iterations, repeats, quick, timeout_s, say)
        else:
            with _cluster(
                net, max(CALIBRATION_HOSTS, *(c["hosts"] for c in mine)), net_dir
            ) as problem:
                if problem:
                    for cell in mine:
                        _write_row(_cell_dir(net_dir, cell), cell, [], f"failed: {problem}")
                    say(f"{net}: {problem}")
                else:
                    _run_network(
                        mine, net_dir, _on_cluster, iterations, repeats, quick, timeout_s, say
                    )
        rows += [read_cell(_cell_dir(net_dir, c)) for c in mine]
    return rows


def _on_cluster(n, command):
    return [sys.executable, "-m", "real.cluster", "run", "-n", str(n), "--", *command]


@contextlib.contextmanager
def _cluster(net, hosts, net_dir):
    """``with _cluster(net, hosts, net_dir) as problem``: an emulated cluster of ``hosts`` hosts
    at rate ``net`` is up inside (or ``problem`` says why not). It is taken down on the way out,
    whatever happens (an error, Ctrl-C, an ``up`` killed half-way), unless ``up`` itself refused:
    then nothing under the prefix is ours (another cluster may be up) and ``up`` has removed
    what it made."""
    up = [sys.executable, "-m", "real.cluster", "up", "--hosts", str(hosts), "--bandwidth", net]
    refused = False
    try:
        code, line = _call(up, CLUSTER_TIMEOUT_S, net_dir / "cluster-up.log")
        refused = code not in (0, None)  # None: timed out, killed by us half-way
        yield None if code == 0 else f"cluster up: {line}"
    finally:
        if not refused:
            down = [sys.executable, "-m", "real.cluster", "down"]
            _call(down, CLUSTER_TIMEOUT_S, net_dir / "cluster-down.log")


def _run_network(cells, net_dir, launch, iterations, repeats, quick, timeout_s, say):
    """Calibrate on 2 hosts, then run every cell (rows written to each cell's row.json)."""
    profile = net_dir / "profile.toml"
    argv = launch(
        CALIBRATION_HOSTS,
        [
            sys.executable,
            "-m",
            "real.calibrate",
            "--models",
            "mlp",
            "--out",
            str(profile),
            *["--quick"] * quick,
        ],
    )
    net_dir.mkdir(parents=True, exist_ok=True)
    before = probe_phase(net_dir)
    code, line = _call(argv, CALIBRATION_TIMEOUT_S[quick], net_dir / "calibrate.log")
    (net_dir / "phase.json").write_text(json.dumps({"calibration": [before, probe_phase(net_dir)]}))
    if code != 0:
        for cell in cells:
            cell_dir = _cell_dir(net_dir, cell)
            _write_row(cell_dir, cell, [argv], f"failed: calibration: {line}")
            say(_progress(read_cell(cell_dir)))
        return
    plans = [
        _plan_cell(c, _cell_dir(net_dir, c), launch, profile, iterations, repeats) for c in cells
    ]
    for k in range(repeats):  # repeat k of every cell, then k + 1: drift falls on all of them
        for plan in plans:
            if plan["status"] is None:
                _run_real(plan, k, timeout_s)
    for plan in plans:
        if plan["status"] is None:
            code, line = _call(plan["sim"], timeout_s, plan["dir"] / "sim.log")
            plan["status"] = "ok" if code == 0 else f"failed: sim: {line}"
        _write_row(
            plan["dir"], plan["cell"], [*plan["reals"], plan["sim"]], plan["status"], plan["phase"]
        )
        say(_progress(read_cell(plan["dir"])))


def _plan_cell(cell, cell_dir, launch, profile, iterations, repeats):
    """A cell's commands (its repeats of the real run, then the simulation), its folder
    cleared and its row.json written as running (or not run, if real.train would refuse the
    flags); returns the plan `_run_network` carries out, ``status`` None while it runs."""
    flags = train_flags(cell, iterations)
    reals = [
        launch(
            cell["hosts"],
            [sys.executable, "-m", "real.train", *flags, "--out", str(cell_dir / f"real-{k}")],
        )
        for k in range(1, repeats + 1)
    ]
    sim = [
        sys.executable,
        "-m",
        "sim.run",
        "--nodes",
        str(cell["hosts"]),
        *flags,
        "--profile",
        str(profile),
        "--compute",
        "empirical",
        "--out",
        str(cell_dir / "sim"),
    ]
    _clear(cell_dir)
    refused = _refused(flags, cell["hosts"])
    status = f"not run: {refused}" if refused else None
    _write_row(cell_dir, cell, [*reals, sim], status or "running")
    return {
        "cell": cell,
        "dir": cell_dir,
        "reals": reals,
        "sim": sim,
        "status": status,
        "phase": [],
    }


def _run_real(plan, k, timeout_s):
    """Repeat ``k`` (0-based) of a cell's real run, the machine's phase probed after it; a
    failure ends the cell (its status)."""
    code, line = _call(plan["reals"][k], timeout_s, plan["dir"] / f"real-{k + 1}.log")
    plan["phase"].append(probe_phase(plan["dir"]))
    if code == 2:
        plan["status"] = f"not run: {line}"
    elif code != 0:
        plan["status"] = f"failed: real run {k + 1}: {line}"


def _refused(flags, hosts):
    """Why real.train would refuse ``flags`` on ``hosts`` ranks (its own rules), or None."""
    from twinsgd.cli import CheckingParser
    from twinsgd.run.config import add_config_arguments, parse_config

    try:
        parse_config(flags, add_config_arguments(CheckingParser(prog="real.train"))).check_size(
            hosts
        )
    except ValueError as err:
        return str(err)
    return None


def _clear(cell_dir):
    """Remove what an earlier validation left in this cell (its run folders, logs, row.json)."""
    import shutil

    for path in [*cell_dir.glob("real-*"), *cell_dir.glob("sim*"), cell_dir / "row.json"]:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def _write_row(cell_dir, cell, commands, status, phase=()):
    cell_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "network": cell["network"],
        "config": cell["config"],
        "hosts": cell["hosts"],
        "flags": list(cell["flags"]),
        "status": status,
        "commands": commands,
        "phase_us": list(phase),
    }
    tmp = cell_dir / "row.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(cell_dir / "row.json")


def probe_phase(folder):
    """The machine's phase now (`real.phase`'s round trip, us, on 2 ranks of the venv's
    mpiexec, through this machine's shared memory whatever network the cell emulates), or
    None where it could not be taken (its output in ``folder/phase.log``)."""
    argv = launch_command(2, [sys.executable, "-m", "real.phase"])
    code, _ = _call(argv, PHASE_TIMEOUT_S, Path(folder) / "phase.log")
    try:
        return float((Path(folder) / "phase.log").read_text().split()[0]) if code == 0 else None
    except (OSError, ValueError, IndexError):
        return None


def _cell_dir(net_dir, cell):
    return net_dir / f"{cell['config']}-{cell['hosts']}"


def _folder_name(net):
    return "".join(ch if ch.isalnum() or ch in ".-+" else "_" for ch in net)


def _progress(row):
    where = f"{row['network']} {row['config']} on {row['hosts']}"
    if row["status"] != "ok":
        return f"{where}: {row['status']}"
    return (
        f"{where}: measured {row['measured_ms']:.3f} ms/it, simulated {row['sim_ms']:.3f} "
        f"ms/it ({'-' if row['error_pct'] is None else format(row['error_pct'], '+.1f')} %)"
    )


def _call(argv, timeout_s, log):
    """Run ``argv`` in a session of its own, its output in ``log``.

    Returns (exit status, or None if it timed out; the first line of its stderr, or for a
    traceback the exception's line). A run that times out or is interrupted gets SIGINT (MPI
    launchers and real.cluster clean up on it), then SIGKILL `STOP_GRACE_S` later; an
    interruption is re-raised.
    """
    log = Path(log)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=err, start_new_session=True, env={**os.environ, **ENV}
            )
        except OSError as error:
            return 127, f"cannot run {argv[0]}: {error.strerror}"
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(proc)
            code = None
        except KeyboardInterrupt:
            _stop(proc)
            raise
        err.seek(0)
        text = err.read()
        out.write(text)
    if code is None:
        return None, f"timed out after {timeout_s:g} s"
    return code, _first_line(text.decode(errors="replace"))


def _stop(proc):
    for sig in (signal.SIGINT, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _first_line(text):
    """The first line of ``text``; of a traceback, the exception's line."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return "no message on stderr"
    if lines[0].startswith("Traceback"):
        return next((line for line in lines[1:] if not line[0].isspace()), lines[-1]).strip()
    return lines[0].strip()


# -- command line --------------------------------------------------------------------------------


def build_parser():
    parser = OneLineParser(
        prog="python -m twinsgd.analysis.validate",
        description=(
            "Measure a matrix of configurations for real and simulate each on a profile calibrated "
            "on 2 hosts; print the prediction errors (Markdown) and write DIR/validation.md and "
            "DIR/validation.csv."
        ),
    )
    parser.add_argument(
        "--out",
        default="runs/validate",
        metavar="DIR",
        help="where the run folders and tables go (default: %(default)s)",
    )
    parser.add_argument(
        "--networks",
        metavar="NET,...",
        help=f"shm (this machine) and/or emulated rates such as 1Gbit (root "
        f"only) (default: {','.join(NETWORKS)})",
    )
    parser.add_argument(
        "--configs",
        metavar="NAME,...",
        help=f"a subset of the matrix: {', '.join(CONFIGS)} (default: all)",
    )
    parser.add_argument("--hosts", metavar="H,...", help="host counts (default: 2,4)")
    parser.add_argument(
        "--iterations", type=int, metavar="I", help="training steps per run (default: 200)"
    )
    parser.add_argument("--repeats", type=int, metavar="R", help="real runs per cell (default: 3)")
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds allowed per run (default: 120 + 1 per iteration)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI: 60 iterations, 1 repeat, allreduce-ring,ps-sync,gossip-ring, "
        "2 hosts, the first emulated network if root else shm",
    )
    parser.add_argument(
        "--launcher",
        metavar="CMD",
        help='what starts the shm network\'s runs, given "-n N" and the command: "srun '
        '--mpi=pmi2" on an allocation, whose own network the rows then measure (default: '
        "$TWINSGD_LAUNCHER, else the venv's mpiexec)",
    )
    parser.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="rebuild the table from DIR's run folders; nothing is run",
    )
    return parser


def _options(args):
    """Resolve the flags (explicit ones over --quick's, over the defaults); ValueError if bad."""
    quick = QUICK if args.quick else {}
    iterations = args.iterations if args.iterations is not None else quick.get("iterations", 200)
    repeats = args.repeats if args.repeats is not None else quick.get("repeats", 3)
    _at_least(1, iterations=iterations, repeats=repeats)
    if args.timeout is not None and not args.timeout > 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    configs = _list(args.configs, "--configs") if args.configs else quick.get("configs", CONFIGS)
    for name in configs:
        if name not in CONFIGS:
            raise ValueError(
                f"--configs: unknown configuration {name!r} (known: {', '.join(CONFIGS)})"
            )
    hosts = (
        [_hosts(h) for h in _list(args.hosts, "--hosts")]
        if args.hosts
        else quick.get("hosts", (2, 4))
    )
    networks = _list(args.networks, "--networks") if args.networks else NETWORKS
    for net in networks:
        if net != "shm":
            try:
                network_rate_Bps(net)
            except ValueError:
                raise ValueError(
                    f"--networks: {net!r} is neither shm nor a rate such as 1Gbit, 100Mbit"
                ) from None
    if args.quick and not args.networks:
        emulated = [net for net in networks if net != "shm"]
        networks = emulated[:1] if emulated and _cannot_emulate() is None else ["shm"]
    return iterations, repeats, list(configs), sorted(set(hosts)), list(networks)


def _list(text, flag):
    items = list(dict.fromkeys(item.strip() for item in text.split(",") if item.strip()))
    if not items:
        raise ValueError(f"{flag} needs a comma-separated list, got {text!r}")
    return items


def _hosts(text):
    try:
        hosts = int(text)
    except ValueError:
        raise ValueError(f"--hosts: {text!r} is not a whole number of hosts") from None
    _at_least(1, hosts=hosts)
    return hosts


def _at_least(low, **values):
    for name, value in values.items():
        if value < low:
            raise ValueError(f"--{name} must be >= {low}, got {value}")


def _cannot_emulate():
    """Why this process cannot build an emulated cluster, or None."""
    import importlib.util

    if os.geteuid() != 0:
        return "emulated networks need root (python -m real.cluster builds namespaces)"
    if importlib.util.find_spec("real.cluster") is None:
        return "real.cluster is not installed"
    return None


def _interrupt(stopped, signum):
    stopped.append(signum)
    raise KeyboardInterrupt


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.source is not None:
        rows = read_rows(args.source)
        if not rows:
            parser.error(f"--from {args.source}: no cells (NET/CONFIG-H/row.json) found")
        print(write_outputs(rows, args.source), end="")
        return 0
    try:
        iterations, repeats, configs, hosts, networks = _options(args)
        launcher = parse_launcher(args.launcher) if args.launcher else default_launcher()
    except ValueError as err:
        parser.error(str(err))
    if launcher is not None and shutil.which(launcher[0]) is None:
        parser.error(f"--launcher: {launcher[0]!r} is not a program on PATH")
    emulated = [net for net in networks if net != "shm"]
    why = _cannot_emulate() if emulated else None
    if why and len(emulated) == len(networks):
        parser.error(f"--networks {','.join(networks)}: {why}")
    if why:
        logger.warning(f"skipping {', '.join(emulated)}: {why}")
        networks = ["shm"]
    cells = matrix(configs, hosts, networks)
    try:  # the one folder everything goes into: refused now, in one line, if it cannot be
        Path(args.out).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        parser.error(f"--out {args.out}: cannot create it ({err.strerror or err})")
    stopped = [signal.SIGINT]
    previous = {
        sig: signal.signal(sig, lambda signum, frame: _interrupt(stopped, signum))
        for sig in (signal.SIGTERM, signal.SIGHUP)
    }  # stop as on Ctrl-C
    try:
        rows = run_matrix(
            cells,
            args.out,
            iterations,
            repeats,
            args.quick,
            args.timeout,
            say=logger.info,
            launcher=launcher,
        )
    except KeyboardInterrupt:
        logger.error(
            f"stopped by {signal.Signals(stopped[-1]).name} (runs stopped, no table written)"
        )
        return 128 + stopped[-1]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(write_outputs(rows, args.out), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
