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

import dataclasses
import importlib.metadata
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

import numpy as np

from models import build_model
from models.threads import one_blas_thread
from sim.analytic import analytic_gaps, check_analytic, run_analytic
from sim.backend import Simulator, rare_collections
from sim.cluster import Cluster, add_network_arguments, build_cluster, parse_steps_sample
from sim.cluster_profile import load_profile
from sim.compute import parse_stragglers
from twinsgd.cli import OneLineParser
from twinsgd.data import DataError, load_dataset
from twinsgd.programs import node_program, updates_per_step
from twinsgd.programs.ghost import ghost_dataset, ghost_model
from twinsgd.programs.ops import PeerFailed
from twinsgd.run import prepare_nodes
from twinsgd.run.checkpoint import Checkpointer, keep_logs_until, load, restore, resume_point
from twinsgd.run.config import RunConfig, add_config_arguments, parse_command
from twinsgd.run.faults import InjectedFault
from twinsgd.run.interrupt import one_line_on_interrupt
from twinsgd.run.runfolder import RunFolder, claim_run_folder
from twinsgd.run.runlog import (
    DISK_FULL,
    RunLog,
    chrome_trace_pieces,
    failure_status,
    progress_bar,
    run_header,
)
from twinsgd.run.units import flag_type

logger = logging.getLogger(__name__)


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
    add_network_arguments(cluster)
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
        "--speeds",
        default="1x",
        metavar="F,F,...|DIST|FILE",
        help="relative speed per node (0.5x: half speed): a list cycled over "
        "the nodes, a file of one factor a line, or drawn per node "
        "(seeded): lognormal:SIGMA (median 1x), uniform:LO:HI (default: 1x)",
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
        "resnet50, cnn-cifar (our numpy cnn), or a parameter count (compute from --profile, "
        "else free)",
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
        type=flag_type(parse_steps_sample),
        default=None,
        metavar="K|all",
        help="steps.csv and summary.json's per_node keep every K-th node (totals and means "
        "count all nodes; default: every node up to 1,000 nodes, about 1,000 nodes above; "
        "all: every node)",
    )
    cluster.add_argument(
        "--engine",
        choices=("auto", "events", "analytic"),
        default="auto",
        help="events: SimPy, every message and collective an event; analytic: "
        "numpy over the node axis for a synchronous ghost allreduce (the closed form "
        "step by step: a million nodes in seconds; the same run folder); auto: analytic "
        "where it applies with --collectives closed-form, else events (default: auto)",
    )
    return add_config_arguments(parser)


def engine_for(cfg, cluster):
    """The engine ``--engine`` names; for ``auto``, the analytic engine where it computes this
    run's folder (closed-form collectives, nothing it lacks: `sim.analytic.analytic_gaps`),
    else the events. Why: the two give the same folder where both apply (tested byte for
    byte), and the analytic one is ten times faster at 10,000 nodes (0.9 s against 10.5 s)."""
    if cluster.engine != "auto":
        return cluster.engine
    applies = cluster.collectives == "closed-form" and not analytic_gaps(cfg, cluster)
    return "analytic" if applies else "events"


class RunStopped(Exception):
    """The simulated run stopped at a fault (``sim.run`` exits 3); its folder's status and this
    message say why."""


@dataclass
class Simulation:
    """A simulated run set up and checked (`prepare_simulation`), ready to run: everything a bad
    input could be refused for has been refused, and its run folder claimed."""

    cfg: RunConfig
    cluster: Cluster
    nodes: list  # one `Node` per rank (rank 0 alone under the analytic engine)
    network: object  # a `sim.network.RoutedNetwork` with no clock yet (None: analytic, star)
    folder: RunFolder
    saved: list  # each rank's checkpoint (arrays, meta) of a resumed run, else []
    header: dict  # the run's config.json document


def prepare_simulation(cfg, options, say=logger.info):
    """Check a simulated run and set it up: profile, data, the `Cluster` (its network made once,
    here), nodes, resume point, and last its run folder, so that bad input leaves no folder
    behind. ``options``: sim.run's cluster flags (`build_parser`'s "cluster" group). ValueError
    or `DataError` naming the flag; ``say(note)`` gets the lines saying what a default chose to
    fit the data, and the data set's note."""
    blas = one_blas_thread()  # measured compute is timed as a rank with one BLAS thread runs
    profile = load_profile(options.profile) if options.profile else None
    cfg.check_size(options.nodes)
    dataset, shared_model = _data_and_model(cfg, options)
    name, flops_per_sample, params = _model_size(cfg, dataset, shared_model)
    if profile is not None and shared_model is None and options.compute in ("profile", "empirical"):
        profile.check_timed_on(name, dataset.input_shape)
    cluster = build_cluster(options, profile, cfg, name, flops_per_sample)
    if cluster.memory.cache_bytes:  # copies at the cache's rate if a host's gradients fit it
        touched = cluster.ranks_per_host * 2 * 4 * params  # a rank's float32 gradient, received
        cluster = dataclasses.replace(cluster, memory=cluster.memory.within(touched))
    logger.debug(f"cluster: {cluster.describe()}")
    cluster = dataclasses.replace(cluster, engine=engine_for(cfg, cluster))
    size, analytic, network = cluster.ranks, cluster.engine == "analytic", None
    if analytic:  # a few arrays over the nodes: no nodes, and a network only to price its ring
        check_analytic(cfg, cluster)
        if cluster.network != "star":
            network = cluster.make_network()
    else:
        check_memory(size, 0 if shared_model else params)  # before anything of size --nodes
        network = cluster.make_network()
    if shared_model is not None and (cfg.checkpoint_every or cfg.resume):
        raise ValueError("--ghost carries no weights to checkpoint or resume")
    if dataset.note:
        say(dataset.note)
    if shared_model is not None and cfg.eval_every:
        say(f"--ghost has no values to evaluate: --eval-every {cfg.eval_every} ignored")
    built = []  # the first node's model, whose scratch the others share
    nodes = prepare_nodes(
        range(1 if analytic else size),
        size,
        cfg,
        dataset,
        lambda _: shared_model or node_model(cfg, dataset, built),
        say,
    )
    saved = []
    if cfg.resume:
        step = resume_point(cfg, size)  # after fit_data: the options as the run had them
        saved = [load(cfg.resume, rank, step) for rank in range(size)]
        keep_logs_until(cfg.resume, step)
    folder = RunFolder(
        Path(cfg.resume)
        if cfg.resume
        else claim_run_folder(cfg.out, _run_name(cfg, options), cfg.overwrite)
    )
    cfg.out = str(folder.path)
    if profile is not None:  # the profile as simulated, beside the run it made
        folder.write_bytes("profile.toml", profile.source)
    header = run_header(
        cfg,
        dataset,
        nodes[0].model,
        size,
        "simulated",
        "sim.run",
        mpi=None,
        cluster=cluster.header(),
        blas_threads=blas,
        versions={"simpy": importlib.metadata.version("simpy")},
    )
    return Simulation(cfg, cluster, nodes, network, folder, saved, header)


def node_model(cfg, dataset, built):
    """A simulated node's model: its own weights, and the scratch arrays of the first one made
    (kept in ``built``): the nodes of one process compute one at a time (`Model.share_scratch`)."""
    model = build_model(cfg.model, dataset.input_shape, dataset.n_classes, seed=cfg.seed)
    if built:
        model.share_scratch(built[0])
    else:
        built.append(model)
    return model


def run_simulation(run):
    """Run a prepared `Simulation` to its end, writing its run folder as it goes; returns the
    summary (summary.json's document, as written). `RunStopped` when a fault stopped it (its
    folder says why, with every node's totals); any other exception marks the folder failed and
    propagates."""
    cfg, cluster, nodes, folder, header = run.cfg, run.cluster, run.nodes, run.folder, run.header
    size, reporter = cluster.ranks, nodes[0].reporter
    per_epoch = nodes[0].steps_per_epoch * updates_per_step(cfg, size, reporter)
    if cluster.engine == "analytic":
        chunk = nodes[0].model.n_params * 4 / size
        bar = progress_bar(nodes[0].total_steps) if cfg.progress else None
        try:
            run_analytic(
                nodes[0],
                size,
                cluster,
                (run.network or cluster).ring_link(chunk),  # a star's without making it
                folder,
                header,
                cfg.target_accuracy,
                bar,
            )
        finally:
            if bar is not None:
                bar.close()
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
                write_steps=rank % cluster.steps_sample == 0,
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
        cluster.latency_s,
        cluster.bandwidth_Bps,
        cluster.compute,
        cluster.collectives,
        run.network,
        entry_barrier=cfg.measure_wait and cluster.collectives == "message",
        eager_bytes=cluster.eager_bytes,
        send_overhead_s=cluster.send_overhead_s,
        send_cost=cluster.send_cost,
        probe_cost=cluster.probe_cost,
        call_overhead_s=cluster.call_overhead_s,
        mpi=cluster.mpi,
        gamma=cluster.combine,
        library_gamma=cluster.library_combine,
        finish=cluster.finish,
        local_copy=cluster.local_copy,
        copy_read_by_peer=cluster.copy_read_by_peer,
        wire=cluster.wire,
        core_groups=cluster.core_groups,
        time_slice_s=cluster.time_slice_s,
        over_tcp=cluster.over_tcp,
        stack_cpu=cluster.stack_cpu,
        switch_s=cluster.switch_s,
        poll_wait_s=cluster.poll_wait_s,
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
        simulator.run([node_program(cfg)(node) for node in nodes], cluster.faults)
    except (PeerFailed, InjectedFault) as failure:  # as real.train stops: exit 3, status says why
        _stopped(log, logs, str(failure))
    except KeyboardInterrupt:
        log.all_totals = [node_log.node_totals() for node_log in logs]
        log.fail(f"interrupted (SIGINT) at simulated {simulator.env.now:.6g} s")
        raise
    except BaseException as err:
        log.fail(failure_status(err))
        raise
    finally:
        if bar is not None:
            bar.close()
    failed, failures = simulator.faults.failed, simulator.faults.failures
    if reporter in failed:  # nobody left to report the result: the run failed
        _stopped(log, logs, "; ".join(failures[r] for r in sorted(failed)))
    log.all_totals = [node_log.node_totals() for node_log in logs]
    log.sample_per_node(cluster.steps_sample)
    if failed:
        log.header["failed"] = [
            {"rank": r, "time_s": t, "why": failures[r]} for r, t in failed.items()
        ]
    log.finish(
        "done",
        nodes[reporter].model.named_arrays(),
        chrome_trace_pieces(simulator.timeline.columns, cfg.algorithm, "simulated"),
    )
    return folder.read_json("summary.json")


def simulate(cfg, options, say=logger.info):
    """Simulate the run ``cfg`` (a `RunConfig`) on the cluster ``options`` (sim.run's flags) and
    write its run folder; returns its summary. `prepare_simulation`, then `run_simulation`
    (their errors: ValueError or `DataError` for bad input, `RunStopped` at a fault).

    Examples
    --------
    >>> import tempfile
    >>> from twinsgd.run.config import parse_command
    >>> folder = tempfile.TemporaryDirectory()
    >>> cfg, cluster = parse_command(["--nodes", "8", "--algorithm", "allreduce", "--ghost",
    ...                               "resnet50", "--iterations", "5", "--no-progress",
    ...                               "--out", folder.name], build_parser())
    >>> summary = simulate(cfg, cluster)
    >>> summary["nodes"], summary["iterations"], summary["time_s"] > 0
    (8, 5, True)
    >>> folder.cleanup()
    """
    with rare_collections():  # the set-up makes as many long-lived objects as the run
        return run_simulation(prepare_simulation(cfg, options, say))


@one_line_on_interrupt("python -m sim.run")
def main(argv=None):
    parser = build_parser()
    cfg, options = parse_command(argv, parser)
    with rare_collections():  # the set-up makes as many long-lived objects as the run
        try:
            run = prepare_simulation(cfg, options)
        except (DataError, ValueError) as err:
            parser.error(str(err))
        started = perf_counter()
        try:
            summary = run_simulation(run)
        except OSError as err:
            if err.errno not in DISK_FULL:
                raise
            logger.error(f"failed: {failure_status(err)}")
            return 1
        except RunStopped as stop:
            logger.error(f"run stopped: {stop} (run folder {run.folder.path})")
            return 3
        logger.debug(
            f"simulated {summary['time_s']:.6g} s of training in {perf_counter() - started:.2f} s"
        )
        print(_report(summary, run.cluster.ranks, run.folder.path))
        return 0


def _run_name(cfg, options):
    """A default run folder's name: ``allreduce-mnist``, or ``allreduce-ghost-resnet50`` for a
    ghost (which trains on no data set)."""
    return f"{cfg.algorithm}-ghost-{options.ghost}" if options.ghost else cfg.run_name


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


def _data_and_model(cfg, options):
    """The data set, and under ``--ghost`` the one `GhostModel` every node shares (else None:
    each node builds its own ``--model``). ValueError / DataError for bad input."""
    if not options.ghost:
        return load_dataset(
            cfg.dataset, cfg.data_dir, allow_download=os.environ.get("TWINSGD_OFFLINE") != "1"
        ), None
    if cfg.compress != "none":
        raise ValueError(
            f"--ghost carries sizes, not values: --compress {cfg.compress} needs the values"
        )
    model, dataset = ghost_model(options.ghost)
    return dataset or ghost_dataset(cfg.dataset), model


if __name__ == "__main__":
    sys.exit(main())
