"""``python -m sim.run``: the node programs of ``real.train`` in a simulated cluster.

Examples
--------
::

    python -m sim.run --nodes 16 --latency 5us --bandwidth 10Gbps --algorithm allreduce
    python -m sim.run --nodes 4 --algorithm ps --iterations 20   # same weights as mpirun -n 4

Every flag of ``real.train`` means the same here; ``--nodes``, ``--latency`` and ``--bandwidth``
describe the cluster (a star: every node on one switch). The run folder is ``real.train``'s, with
``"clock": "simulated"``. Exit status: 0 done; 2 bad input (one line, no traceback); 3 the run
stopped at a fault (``--faults FILE``, ``--fail``, acted out as ``real.train`` acts them out; its
folder says ``"status": "failed: rank 3 killed at step 40"``); 1 a bug.
"""

import argparse
import importlib.metadata
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models import build_model
from models.threads import one_blas_thread
from sim.analytic import check_analytic, run_analytic
from sim.backend import ComputeModel, Simulator
from sim.cluster_profile import ClusterProfile, load_profile
from sim.network import make_network
from twinsgd.data import DataError, load_dataset
from twinsgd.programs import node_program, updates_per_step
from twinsgd.programs.ghost import ghost_dataset, ghost_model
from twinsgd.programs.ops import PeerFailed
from twinsgd.run import prepare_nodes
from twinsgd.run.checkpoint import Checkpointer, keep_logs_until, load, restore, resume_point
from twinsgd.run.config import OneLineParser, RunConfig, add_config_arguments, parse_command
from twinsgd.run.faults import FaultSchedule, InjectedFault, parse_fail_spec
from twinsgd.run.runfolder import RunFolder, claim_run_folder
from twinsgd.run.runlog import RunLog, chrome_trace, progress_bar, run_header
from twinsgd.run.units import flag_type, parse_bandwidth_Bps, parse_factor, parse_seconds

DEFAULT_LATENCY_S, DEFAULT_BANDWIDTH_BPS = 5e-6, 1.25e9  # a star of 5 us and 10 Gb/s NICs


def build_parser(parser_class=OneLineParser):
    parser = parser_class(
        prog="python -m sim.run",
        description="Run the node programs in a SimPy model of a cluster and write "
        "a run folder with simulated times.",
    )
    cluster = parser.add_argument_group("cluster")
    cluster.add_argument(
        "--nodes", type=int, default=4, help="number of nodes (ranks) (default: 4)"
    )
    cluster.add_argument(
        "--latency",
        default=None,
        type=flag_type(parse_seconds),
        help="node-to-node latency, e.g. 5us, 1.5ms (default: the profile's, else 5us)",
    )
    cluster.add_argument(
        "--bandwidth",
        default=None,
        type=flag_type(parse_bandwidth_Bps),
        help="each NIC's bandwidth, e.g. 10Gbps, 56Gb/s, 12.5GB/s (default: the "
        "profile's, else 10Gbps)",
    )
    cluster.add_argument(
        "--network",
        default=None,
        metavar="star|fat-tree:K|torus|ring|FILE",
        help="physical network: star (one switch; --latency node to node), "
        "k-ary fat tree, 2-D torus, ring, or a GraphML/edge-list file "
        "(--latency per hop, --bandwidth per link); default: the "
        "profile's, else star",
    )
    cluster.add_argument(
        "--collectives",
        choices=("message", "closed-form"),
        default="message",
        help="allreduce as the ring's messages, or one alpha-beta event (scale) (default: message)",
    )
    cluster.add_argument(
        "--compute",
        choices=("measured", "profile", "empirical"),
        default=None,
        help="compute time: the real kernel timed in process (the default), "
        "seconds per sample from --profile (the default and only choice "
        "with --ghost), or each step drawn from the step times a real run "
        "measured (--profile's [compute.steps.MODEL])",
    )
    cluster.add_argument(
        "--profile",
        metavar="NAME|FILE.toml",
        help="cluster profile: a preset of sim/profiles/ (polus-like, "
        "lomonosov-2-like, ...) or a file from python -m real.calibrate; "
        "gives the network's and the nodes' defaults",
    )
    cluster.add_argument(
        "--speeds",
        default="1x",
        metavar="F,F,...|DIST|FILE",
        help="relative speed per node (0.5x: half speed): a list cycled over "
        "the nodes, a file of one factor a line, or drawn per node "
        "(seeded): lognormal:SIGMA (median 1x), uniform:LO:HI (default: 1x)",
    )
    cluster.add_argument(
        "--ranks-per-host",
        type=int,
        default=1,
        metavar="R",
        help="ranks sharing one host's cores (oversubscription slows compute "
        "by R/cores when R > cores; default: 1)",
    )
    cluster.add_argument(
        "--cores-per-host",
        type=int,
        default=None,
        metavar="C",
        help="cores of a host (default: the profile's [cluster] cores, else R)",
    )
    cluster.add_argument(
        "--stragglers",
        default=None,
        metavar="P:SLOWDOWN",
        type=flag_type(parse_stragglers),
        help="each compute step is SLOWDOWN times slower with probability P, e.g. 0.05:4x (seeded)",
    )
    cluster.add_argument(
        "--ghost",
        default=None,
        metavar="MODEL|PARAMS",
        help="size-only payloads, no math, no accuracy: resnet18, vgg16, "
        "resnet50, or a parameter count (compute from --profile, else free)",
    )
    cluster.add_argument(
        "--fail",
        default=None,
        metavar="NODE@TIME[,...]",
        help="node NODE is killed at simulated TIME, e.g. 3@12.5s (a --faults "
        "kill at a time): synchronous algorithms stop (exit 3), an "
        "asynchronous or stale-synchronous server goes on",
    )
    cluster.add_argument(
        "--steps-sample",
        type=int,
        default=None,
        metavar="K",
        help="steps.csv keeps every K-th node's rows (totals count all nodes; "
        "default: every node, or about 1,000 under --engine analytic)",
    )
    cluster.add_argument(
        "--engine",
        choices=("events", "analytic"),
        default="events",
        help="events: SimPy, every message and collective an event; analytic: "
        "numpy over the node axis for a synchronous ghost allreduce on a "
        "star (the closed form step by step: a million nodes in seconds) "
        "(default: events)",
    )
    return add_config_arguments(parser)


def compute_model(cluster, profile, seed, model_name, flops_per_sample=0, batch_size=None):
    """The `ComputeModel` the cluster flags describe; ValueError naming the flag.

    ``--compute profile`` (implied by ``--ghost``) takes a step's seconds per sample and fixed
    seconds from the profile (`sim.cluster_profile`). A ghost run without a profile computes for
    free. ``--compute empirical`` moves the measured step times to the run's ``batch_size``
    (`StepTimes.at_batch`, by the profile's fit of a step's seconds against its batch).
    """
    seconds_per_sample, seconds_per_step, step_times = None, 0.0, None
    if cluster.ghost and cluster.compute not in (None, "profile"):
        raise ValueError(
            f"--compute {cluster.compute} needs the real kernel, which --ghost does "
            f"not run: ghost compute is --profile's seconds per sample"
        )
    if cluster.compute in ("profile", "empirical") and profile is None:
        raise ValueError(f"--compute {cluster.compute} needs --profile NAME|FILE.toml")
    if cluster.compute == "empirical" and not cluster.ghost:
        step_times = profile.compute_step_times(model_name)
        if batch_size and batch_size != step_times.batch_size:
            # gradients alone (own code timed in process) move by the gradient's own fit
            fit = profile.gradient_fit(model_name, whole_step=step_times.own_code)
            step_times = step_times.at_batch(batch_size, *fit)
    elif cluster.compute == "profile" or cluster.ghost:
        if profile is not None:
            seconds_per_sample = profile.compute_seconds_per_sample(model_name, flops_per_sample)
            seconds_per_step = profile.compute_seconds_per_step(model_name)
        else:
            seconds_per_sample = 0.0
    speeds, probability, slowdown = _node_speeds(cluster, seed)
    share = _core_share(cluster, profile, step_times)
    return ComputeModel(
        seconds_per_sample,
        tuple(s * share for s in speeds),
        probability,
        slowdown,
        seed,
        step_times,
        seconds_per_step,
    )


def _core_share(cluster, profile, step_times=None):
    """The share of a core each rank gets: ``min(1, cores / ranks)`` per host with
    ``--ranks-per-host R`` on hosts of ``--cores-per-host C`` cores (else the profile's
    ``[cluster] cores``). A time-sharing model: every rank on a host computes at once (as in a
    synchronous step), so R ranks on C < R cores each run C/R as fast.

    A profile of hosts emulated on one machine (``one_machine``) puts every node of the run on
    that machine's cores (R = --nodes) unless --ranks-per-host says otherwise. Step times
    measured in a real run already carry the sharing of that run: the share is relative to it
    (`StepTimes.core_slowdown`)."""
    one_machine = profile is not None and profile.one_machine and cluster.ranks_per_host == 1
    ranks = cluster.nodes if one_machine else cluster.ranks_per_host
    for flag, value in (
        ("--ranks-per-host", cluster.ranks_per_host),
        ("--cores-per-host", cluster.cores_per_host),
    ):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    cores = cluster.cores_per_host or (profile.cores if profile else None) or ranks
    if step_times is not None:
        return 1.0 / step_times.core_slowdown(
            ranks, cores if one_machine or cluster.ranks_per_host > 1 else 0
        )
    return min(1.0, cores / ranks)


def network_costs(cluster, profile):
    """The profile's measured cost models by message pattern, unless --latency or --bandwidth
    overrides the profile's network, or --network asks for another than the profile's."""
    if (
        profile is None
        or cluster.latency is not None
        or cluster.bandwidth is not None
        or (cluster.network and cluster.network != profile.network)
    ):
        return {}
    return profile.costs


def _network_slowdown(cluster, profile):
    """How many times more ranks share each core of a one-machine profile in this run than
    when it was measured (its step times' ranks, else 2, the calibration's pair), if more: the
    measured network costs slow by it (`sim.cluster_profile.Slowed`). 1 elsewhere."""
    if not profile.one_machine or not profile.cores:
        return 1.0
    measured = next(iter(profile.step_times.values())).ranks if profile.step_times else 2
    now = max(1.0, cluster.nodes / profile.cores)
    return max(1.0, now / max(1.0, measured / profile.cores))


def network_model(cluster, profile):
    """(network spec, latency s, bandwidth B/s): the flags, else the profile's, else a star of
    5 us and 10 Gb/s."""

    def pick(flag, from_profile, default):
        return flag if flag is not None else from_profile if from_profile is not None else default

    have = profile or ClusterProfile(path="")
    return (
        pick(cluster.network, have.network, "star"),
        pick(cluster.latency, have.latency_s, DEFAULT_LATENCY_S),
        pick(cluster.bandwidth, have.bandwidth_Bps, DEFAULT_BANDWIDTH_BPS),
    )


def node_speeds(spec, nodes, seed):
    """Relative speeds of ``--speeds spec``: a list (cycled over the nodes), a file of one
    factor a line, or one draw per node of ``lognormal:SIGMA`` (median 1) or ``uniform:LO:HI``
    from a generator seeded by ``seed``. ValueError naming the flag."""
    kind, _, parameters = spec.partition(":")
    rng = np.random.default_rng([seed, 2])
    if kind in ("lognormal", "uniform"):
        try:
            values = [float(x) for x in parameters.split(":")]
        except ValueError:
            values = []
        if kind == "lognormal" and len(values) == 1 and values[0] >= 0:
            return tuple(float(x) for x in rng.lognormal(0.0, values[0], nodes))
        if kind == "uniform" and len(values) == 2 and 0 < values[0] <= values[1]:
            return tuple(float(x) for x in rng.uniform(*values, nodes))
        raise ValueError(
            f"--speeds expects lognormal:SIGMA (SIGMA >= 0) or uniform:LO:HI "
            f"(0 < LO <= HI), got {spec}"
        )
    if Path(spec).is_file():
        text = Path(spec).read_text().split()
        speeds = tuple(parse_factor(x if x[-1] == "x" else x + "x") for x in text)
    else:
        speeds = tuple(parse_factor(x) for x in spec.split(","))
    if not speeds or not all(x > 0 for x in speeds):
        raise ValueError(f"--speeds must be > 0, got {spec}")
    return speeds


def parse_stragglers(spec):
    """``--stragglers P:SLOWDOWN`` -> (P, SLOWDOWN): 0 <= P <= 1, SLOWDOWN >= 1 (a factor such
    as 4x); ValueError saying what is wrong.

    >>> parse_stragglers("0.05:4x")
    (0.05, 4.0)
    """
    p, colon, factor = spec.partition(":")
    try:
        probability = float(p)
    except ValueError:
        probability = math.nan
    if not colon or not 0.0 <= probability <= 1.0:
        raise ValueError(
            f"stragglers: expects P:SLOWDOWN with 0 <= P <= 1, e.g. 0.05:4x, got {spec!r}"
        )
    slowdown = parse_factor(factor)
    if slowdown < 1.0:
        raise ValueError(f"stragglers: SLOWDOWN must be >= 1x, got {spec!r}")
    return probability, slowdown


def _node_speeds(cluster, seed):
    """(speeds, straggle probability, slowdown) from --speeds and --stragglers."""
    try:
        speeds = node_speeds(cluster.speeds, cluster.nodes, seed)
    except ValueError as err:
        message = str(err)
        raise ValueError(
            message if message.startswith("--speeds") else f"--speeds {cluster.speeds}: {message}"
        ) from None
    probability, slowdown = cluster.stragglers or (0.0, 1.0)
    return speeds, probability, slowdown


class RunStopped(Exception):
    """The simulated run stopped at a fault (``sim.run`` exits 3); its folder's status and this
    message say why."""


@dataclass
class Simulation:
    """A simulated run set up and checked (`prepare_simulation`), ready to run: everything a bad
    input could be refused for has been refused, and its run folder claimed."""

    cfg: RunConfig
    cluster: argparse.Namespace  # sim.run's cluster options (`build_parser`'s "cluster" group)
    nodes: list  # one `Node` per rank (rank 0 alone under the analytic engine)
    network: object  # a `sim.network.RoutedNetwork` with no clock yet (None: analytic engine)
    network_spec: str
    latency_s: float
    bandwidth_Bps: float
    costs: dict  # measured cost models by message pattern ({} unless a calibrated profile's)
    shaping: object  # `sim.shaping.Shaping` of a calibrated profile's token buckets, or None
    slowdown: float  # the measured network costs' slow-down for this many ranks per core
    eager_bytes: int
    compute: ComputeModel
    faults: FaultSchedule
    folder: RunFolder
    saved: list  # each rank's checkpoint (arrays, meta) of a resumed run, else []
    header: dict  # the run's config.json document


def _stderr(note):
    print(f"python -m sim.run: {note}", file=sys.stderr)


def prepare_simulation(cfg, cluster, say=_stderr):
    """Check a simulated run and set it up: profile, network (made once, here), data, nodes,
    compute model, faults, resume point, and last its run folder, so that bad input leaves no
    folder behind. ValueError or `DataError` naming the flag; ``say(note)`` gets the lines
    saying what a default chose to fit the data, and the data set's note."""
    blas = one_blas_thread()  # measured compute is timed as a rank with one BLAS thread runs
    size = cluster.nodes
    if size < 1:
        raise ValueError(f"--nodes must be >= 1, got {size}")
    if cluster.steps_sample is not None and cluster.steps_sample < 1:
        raise ValueError(f"--steps-sample must be >= 1, got {cluster.steps_sample}")
    profile = load_profile(cluster.profile) if cluster.profile else None
    network_spec, latency_s, bandwidth_Bps = network_model(cluster, profile)
    costs = network_costs(cluster, profile)
    slowdown = _network_slowdown(cluster, profile) if costs else 1.0
    shaping = profile.shaping(slowdown) if costs else None
    costs = profile.slowed_costs(slowdown) if costs else costs
    cfg.check_size(size)
    dataset, shared_model = _data_and_model(cfg, cluster)
    name, flops_per_sample, params = _model_size(cfg, dataset, shared_model)
    analytic = cluster.engine == "analytic"
    network = None
    if analytic:  # a few arrays over the nodes: no network, no nodes
        check_analytic(cfg, cluster, network_spec, costs)
    else:
        check_memory(size, 0 if shared_model else params)  # before anything of size --nodes
        network = make_network(None, network_spec, size, latency_s, bandwidth_Bps, costs, shaping)
    compute = compute_model(cluster, profile, cfg.seed, name, flops_per_sample, cfg.batch_size)
    faults = FaultSchedule(
        cfg.fault_schedule().check_size(size).faults
        + parse_fail_spec(cluster.fail).check_size(size, "--fail").faults
    )
    if shared_model is not None and (cfg.checkpoint_every or cfg.resume):
        raise ValueError("--ghost carries no weights to checkpoint or resume")
    if dataset.note:
        say(dataset.note)
    nodes = prepare_nodes(
        range(1 if analytic else size),
        size,
        cfg,
        dataset,
        lambda _: (
            shared_model
            or build_model(cfg.model, dataset.input_shape, dataset.n_classes, seed=cfg.seed)
        ),
        say,
    )
    saved = []
    if cfg.resume:
        step = resume_point(cfg, size)  # after fit_data: the options as the run had them
        saved = [load(cfg.resume, rank, step) for rank in range(size)]
        keep_logs_until(cfg.resume, step)
    folder = RunFolder(
        Path(cfg.resume) if cfg.resume else claim_run_folder(cfg.out, cfg.run_name, cfg.overwrite)
    )
    cfg.out = str(folder.path)
    header = run_header(
        cfg,
        dataset,
        nodes[0].model,
        size,
        "simulated",
        "sim.run",
        mpi=None,
        cluster={
            "latency_s": latency_s,
            "bandwidth_Bps": bandwidth_Bps,
            "network": network_spec,
            "profile": cluster.profile,
            "compute": compute.kind,
            "measured_costs": sorted(costs),
            "token_buckets": shaping is not None,
            "network_slowdown": slowdown,
            "collectives": cluster.collectives,
            "speeds": list(compute.speeds) if size <= 10_000 else cluster.speeds,
            "stragglers": cluster.stragglers,
            "seconds_per_sample": compute.seconds_per_sample,
            "seconds_per_step": compute.seconds_per_step,
            "ghost": cluster.ghost,
            "steps_sample": cluster.steps_sample or 1,
            "engine": cluster.engine,
        },
        blas_threads=blas,
        versions={"simpy": importlib.metadata.version("simpy")},
    )
    return Simulation(
        cfg,
        cluster,
        nodes,
        network,
        network_spec,
        latency_s,
        bandwidth_Bps,
        costs,
        shaping,
        slowdown,
        profile.eager_bytes if costs else 0,
        compute,
        faults,
        folder,
        saved,
        header,
    )


def run_simulation(run):
    """Run a prepared `Simulation` to its end, writing its run folder as it goes; returns the
    summary (summary.json's document, as written). `RunStopped` when a fault stopped it (its
    folder says why, with every node's totals); any other exception marks the folder failed and
    propagates."""
    cfg, cluster, nodes, folder, header = run.cfg, run.cluster, run.nodes, run.folder, run.header
    size, reporter = cluster.nodes, nodes[0].reporter
    per_epoch = nodes[0].steps_per_epoch * updates_per_step(cfg, size, reporter)
    if cluster.engine == "analytic":
        run_analytic(
            nodes[0],
            size,
            run.compute,
            run.latency_s,
            run.bandwidth_Bps,
            folder,
            header,
            cfg.target_accuracy,
            cluster.steps_sample,
        )
        return folder.read_json("summary.json")
    logs = {
        reporter: RunLog(folder, header, cfg.target_accuracy, per_epoch, resumed=bool(run.saved))
    }
    steps_csv = logs[reporter].steps  # one writer for every simulated node
    for rank in range(size):
        logs.setdefault(
            rank,
            RunLog(
                folder,
                header,
                cfg.target_accuracy,
                per_epoch,
                reporter=False,
                steps=steps_csv,
                write_steps=rank % (cluster.steps_sample or 1) == 0,
            ),
        )
    logs = [logs[rank] for rank in range(size)]
    log = logs[reporter]
    for node, checkpoint in zip(nodes, run.saved, strict=False):
        restore(node, logs[node.rank], *checkpoint)
    if cfg.checkpoint_every:
        for node in nodes:
            node.checkpointer = Checkpointer(folder.path, cfg.checkpoint_every, logs[node.rank])
    simulator = Simulator(
        nodes,
        logs,
        run.latency_s,
        run.bandwidth_Bps,
        run.compute,
        cluster.collectives,
        run.network,
        entry_barrier=cfg.measure_wait and cluster.collectives == "message",
        eager_bytes=run.eager_bytes,
        start_s=run.saved[reporter][1]["time_s"] if run.saved else 0.0,
    )
    bar = (
        progress_bar(nodes[reporter].total_steps * updates_per_step(cfg, size, reporter))
        if cfg.progress
        else None
    )
    if bar is not None:  # the reporter's steps, as real.train counts them
        simulator.on_step[reporter] = lambda: bar.update()
    try:
        simulator.run([node_program(cfg)(node) for node in nodes], run.faults)
    except (PeerFailed, InjectedFault) as failure:  # as real.train stops: exit 3, status says why
        _stopped(log, logs, str(failure))
    except BaseException as err:
        log.fail(f"{type(err).__name__}: {err}")
        raise
    finally:
        if bar is not None:
            bar.close()
    if reporter in simulator.failed:  # nobody left to report the result: the run failed
        _stopped(log, logs, "; ".join(simulator.failures[r] for r in sorted(simulator.failed)))
    log.all_totals = [node_log.node_totals() for node_log in logs]
    if simulator.failed:
        log.header["failed"] = [
            {"rank": r, "time_s": t, "why": simulator.failures[r]}
            for r, t in simulator.failed.items()
        ]
    log.finish(
        "done",
        nodes[reporter].model.named_arrays(),
        chrome_trace(simulator.timeline, cfg.algorithm, "simulated"),
    )
    return folder.read_json("summary.json")


def simulate(cfg, cluster, say=_stderr):
    """Simulate the run ``cfg`` (a `RunConfig`) on ``cluster`` (sim.run's cluster options) and
    write its run folder; returns its summary. `prepare_simulation`, then `run_simulation`
    (their errors: ValueError or `DataError` for bad input, `RunStopped` at a fault).

    Examples
    --------
    >>> import tempfile
    >>> from twinsgd.run.config import parse_command
    >>> cfg, cluster = parse_command(["--nodes", "8", "--algorithm", "allreduce", "--ghost",
    ...                               "resnet50", "--iterations", "5", "--no-progress",
    ...                               "--out", tempfile.mkdtemp()], build_parser())
    >>> summary = simulate(cfg, cluster)
    >>> summary["nodes"], summary["iterations"], summary["time_s"] > 0
    (8, 5, True)
    """
    return run_simulation(prepare_simulation(cfg, cluster, say))


def main(argv=None):
    parser = build_parser()
    cfg, cluster = parse_command(argv, parser)
    try:
        run = prepare_simulation(cfg, cluster)
    except (DataError, ValueError) as err:
        parser.error(str(err))
    try:
        summary = run_simulation(run)
    except RunStopped as stop:
        print(
            f"python -m sim.run: run stopped: {stop} (run folder {run.folder.path})",
            file=sys.stderr,
        )
        return 3
    print(_report(summary, cluster.nodes, run.folder.path))
    return 0


def _stopped(log, logs, why):
    """Mark the run ``failed: why`` with every node's totals; raise `RunStopped`."""
    log.all_totals = [node_log.node_totals() for node_log in logs]
    log.fail(why)
    raise RunStopped(why)


def _report(summary, size, folder):
    """The run's one line on stdout: what was simulated and where its folder is."""
    accuracy = summary["final_test_accuracy"]
    accuracy = None if accuracy is None or np.isnan(accuracy) else accuracy
    return (
        f"{summary['dataset']}: {size} simulated node(s), {summary['iterations']} steps in "
        f"{summary['time_s']:.4g} simulated s, test accuracy "
        f"{'-' if accuracy is None else f'{100 * accuracy:.2f}%'}, run folder {folder}"
    )


def _model_size(cfg, dataset, shared_model):
    """(model name, forward FLOPs per sample, parameters) of the run's model."""
    if shared_model is not None:
        return (
            shared_model.name or f"ghost:{shared_model.n_params}",
            shared_model.flops_per_sample,
            shared_model.n_params,
        )
    model = build_model(cfg.model, dataset.input_shape, dataset.n_classes, seed=cfg.seed)
    return cfg.model, model.flops_per_sample, model.n_params


# Measured (peak RSS, this machine): a ghost node 9 KB, an MLP node of 167,560 float32 parameters
# 3.5 MB, about 5.2 copies of its weights (weights, gradient, Adam's two moments, ring buffers)
NODE_OVERHEAD_BYTES, WEIGHT_COPIES = 16 * 1024, 6


def check_memory(nodes, params_per_node):
    """Refuse at once a run whose nodes cannot fit in this machine's available memory, instead
    of dying of MemoryError a minute later: about ``NODE_OVERHEAD_BYTES + WEIGHT_COPIES * 4 *
    params_per_node`` bytes a node (``params_per_node`` 0 under --ghost: one shared model)."""
    need = nodes * (NODE_OVERHEAD_BYTES + WEIGHT_COPIES * 4 * params_per_node)
    available = _available_bytes()
    if available is not None and need > available:
        hint = (
            "; --ghost with --collectives closed-form holds no weights per node"
            if params_per_node
            else ""
        )
        raise ValueError(
            f"--nodes {nodes}: about {need / 1e9:.3g} GB of memory for the nodes, "
            f"this machine has {available / 1e9:.3g} GB available{hint}"
        )


def _available_bytes():
    """Memory available to a new allocation (Linux's MemAvailable), bytes; None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _data_and_model(cfg, cluster):
    """The data set, and under ``--ghost`` the one `GhostModel` every node shares (else None:
    each node builds its own ``--model``). ValueError / DataError for bad input."""
    if not cluster.ghost:
        return load_dataset(
            cfg.dataset, cfg.data_dir, allow_download=os.environ.get("TWINSGD_OFFLINE") != "1"
        ), None
    if cfg.compress != "none":
        raise ValueError(
            f"--ghost carries sizes, not values: --compress {cfg.compress} needs the values"
        )
    model, dataset = ghost_model(cluster.ghost)
    return dataset or ghost_dataset(cfg.dataset), model


if __name__ == "__main__":
    sys.exit(main())
