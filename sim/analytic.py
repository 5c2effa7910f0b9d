"""``sim.run --engine analytic``: a synchronous data-parallel run as numpy over the node axis.

Where every node runs the same synchronous program (``--algorithm allreduce``, one step per
synchronisation, size-only ``--ghost`` payloads, any ``--allreduce``), the event simulation with
``--collectives closed-form`` is fully determined by per-node compute times: in step k node i
computes ``c_i = (seconds_per_step + b * seconds_per_sample) * (straggle_i / speed_i)`` (the same
draws as the event engine, `ComputeModel.straggle_factors`), arrives at ``t + c_i``, and every
node leaves at ``t' = (t + max_i c_i) + T`` with ``T`` the closed form's allreduce time
(`sim.closed_form.allreduce_seconds`: the ring's ``2(p-1)(alpha + n/(p beta))``, or the
algorithm's, its adds and the mean's pass). Node i's wait is ``(t' - T) - (t + c_i)``, its
comm ``T``. This module computes exactly that, a step at a time over arrays of p nodes, in the
same floating-point operations as the event engine (its SimPy clock's sums included), at O(p)
numpy work per step instead of O(p) SimPy events: a million nodes for 100 steps in seconds.

The run folder is the event engine's, byte for byte but for config.json's ``"engine"``
(tested): metrics.csv at the evaluation steps (a ghost evaluates to nothing: NaN), steps.csv
for every ``--steps-sample``-th node (by default so that about 1,000 nodes are written),
summary.json with means over all nodes and ``per_node`` over the sampled ones
(``per_node_every`` says which), timeline.json of the drawn nodes (`sim.timeline`) and the
ghost's empty model.npz. So ``--engine auto`` (the default) runs this engine wherever it
applies (`analytic_gaps` finds nothing missing) and the events elsewhere: the default path is
the fast one, with the same result.
"""

import math

import numpy as np

from sim.closed_form import mean_pass_s, priced_allreduce_s
from sim.timeline import Timeline
from twinsgd.programs.collectives import allreduce_bytes
from twinsgd.programs.ghost import GhostArray
from twinsgd.programs.node import Step
from twinsgd.run.runlog import RunLog, chrome_trace_pieces, failure_status


def analytic_gaps(cfg, cluster):
    """What the analytic engine would need and this run lacks, one phrase each naming the flag
    (none: it computes this run's folder exactly as the event engine's closed form does). It
    models the ghost allreduce (any algorithm), every node alike but for its draws, on any
    network whose ring has a closed form (a ghost's compute is always a profile's seconds per
    sample, or none)."""
    needs = [
        (cluster.ghost is not None, "--ghost (size-only payloads: no weights per node)"),
        (cfg.algorithm in ("allreduce", "auto"), f"--algorithm allreduce, got {cfg.algorithm}"),
        (cfg.local_steps == 1, f"--local-steps 1, got {cfg.local_steps}"),
        (
            not cluster.costs and cluster.shaping is None,
            "the network of --latency/--bandwidth, not a calibrated profile's measured costs",
        ),
        (not cluster.faults.faults, "no --faults or --fail"),
    ]
    return [need for ok, need in needs if not ok]


def check_analytic(cfg, cluster):
    """Raise ValueError naming the flag when the analytic engine cannot run this configuration
    (`analytic_gaps`)."""
    gaps = analytic_gaps(cfg, cluster)
    if gaps:
        raise ValueError(f"--engine analytic needs {gaps[0]}")


def run_analytic(node, size, cluster, link, folder, header, target_accuracy, bar=None):
    """Simulate the run of ``size`` copies of ``node`` (rank 0's: its schedule, model size and
    evaluation steps) on ``cluster`` (a `sim.cluster.Cluster`) whose ring steps cost ``link``
    (alpha s, beta B/s: the slowest step's, `RoutedNetwork.ring_link`, on a star
    `Cluster.ring_link`); write the run folder (``bar``: a progress bar, updated a step);
    return the summary."""
    compute, every, algo = cluster.compute, cluster.steps_sample, node.cfg.allreduce
    sampled = np.arange(0, size, every)
    model, samples = node.model, node.cfg.batch_size
    n, itemsize = model.n_params, 4  # the gradient: n float32
    nbytes = n * itemsize
    comm_s = priced_allreduce_s(  # as the closed form prices it (its `_run`)
        algo,
        GhostArray((n,)),
        size,
        cluster.mpi,
        link,
        cluster.combine,
        cluster.library_combine,
        cluster.call_overhead_s,
        mean_pass_s("mean", nbytes, size, cluster.finish, cluster.combine),
    )
    bytes_of = [allreduce_bytes(algo, n, itemsize, int(r), size) for r in sampled]
    if algo == "ring":  # every chunk once per ring step: 2(p-1) n bytes in all
        sent_per_step = 2 * (size - 1) * nbytes if size > 1 else 0
    else:  # each rank's is O(log p): 100,000 ranks' in 4 s, a million's in under a minute
        sent_per_step = sum(allreduce_bytes(algo, n, itemsize, r, size)[0] for r in range(size))
    base = compute.seconds_per_step + samples * compute.seconds_per_sample
    speeds = compute.node_speeds(size)
    scaled = bool(compute.straggle_probability) or any(s != 1.0 for s in compute.speeds)
    per_epoch = node.steps_per_epoch
    header["cluster"]["steps_sample"] = every
    log = RunLog(folder, header, target_accuracy, per_epoch)
    drawn = Timeline([None] * size).traced  # rank -> TracedLog of the nodes drawn
    totals = {"compute_s": np.zeros(size), "comm_s": np.zeros(size), "wait_s": np.zeros(size)}
    t, order = 0.0, np.arange(len(sampled))  # order: the sampled nodes' rows, by index
    try:  # a run stopped midway says so, with its totals so far (as the events do)
        for step in range(1, node.total_steps + 1):
            slow = compute.straggle_factors(step, size) if compute.straggle_probability else 1.0
            # (size,): as the event engine multiplies them, and not at all where it does not
            seconds = base * (slow / speeds) if scaled else np.full(size, base)
            arrived = t + seconds
            last = float(arrived.max())
            # the closed form's timer, as SimPy adds it to the clock: now + ((last + T) - now)
            t_next = t + comm_s if last == t else t + ((last + comm_s) - t)
            wait = (t_next - comm_s) - arrived
            wait[~(wait > 0.0)] = 0.0  # rounding may leave -1e-17 where 0 (as the events clamp)
            totals["compute_s"] += seconds
            totals["wait_s"] += wait
            totals["comm_s"] += comm_s
            for rank, traced in drawn.items():  # what the event engine notes of a drawn node
                traced.charges += ("compute", float(seconds[rank]))
                traced.trace("compute", t)
                waited = float(wait[rank])
                if waited > 0:
                    traced.charges += ("wait", waited)
                traced.charges += ("comm", comm_s)
                traced.trace("allreduce", float(arrived[rank]))
            epoch = (step - 1) // per_epoch
            # the rows in the order the event engine's nodes leave: by arrival, ties in the order
            # they entered, which is the order they left the step before (a stable sort keeps
            # the sampled nodes' part of that order)
            order = order[np.argsort(arrived[sampled[order]], kind="stable")]
            log.steps.write_rows(
                [
                    {
                        "rank": rank,
                        "epoch": epoch,
                        "iteration": step,
                        "time_s": t_next,
                        "compute_s": float(seconds[rank]),
                        "comm_s": comm_s,
                        "wait_s": float(wait[rank]),
                        "bytes_sent": bytes_of[i][0],
                        "bytes_recv": bytes_of[i][1],
                        "staleness": 0,
                        "loss": math.nan,
                    }
                    for i, rank in zip(order.tolist(), sampled[order].tolist(), strict=True)
                ]
            )
            t = t_next
            log.iterations, log.time_s = step, t
            if bar is not None:
                bar.update()
            if node.evaluation_due(
                Step(
                    epoch,
                    step,
                    None,
                    None,
                    last_in_epoch=(step - 1) % per_epoch == per_epoch - 1,
                    last_in_run=step == node.total_steps,
                )
            ):
                _keep_totals(log, totals, sampled, bytes_of, step, size, every, sent_per_step)
                log.evaluation(
                    epoch, step, t, math.nan, math.nan, math.nan, 0.0, moved=sent_per_step * step
                )
    except KeyboardInterrupt:
        _keep_totals(log, totals, sampled, bytes_of, log.iterations, size, every, sent_per_step)
        log.fail(f"interrupted (SIGINT) at simulated {t:.6g} s")
        raise
    except BaseException as err:
        log.fail(failure_status(err))
        raise
    _keep_totals(log, totals, sampled, bytes_of, node.total_steps, size, every, sent_per_step)
    events = {rank: traced.columns for rank, traced in drawn.items()}
    log.finish(
        "done", model.named_arrays(), chrome_trace_pieces(events, node.cfg.algorithm, "simulated")
    )
    return log.summary()


def _keep_totals(log, totals, sampled, bytes_of, steps, size, every, sent_per_step):
    """Put the totals after ``steps`` steps into ``log``: the sampled nodes' as its per-node
    totals, the means and bytes over all nodes as the summary's."""
    log.all_totals = [
        {
            "compute_s": float(totals["compute_s"][r]),
            "comm_s": float(totals["comm_s"][r]),
            "wait_s": float(totals["wait_s"][r]),
            "bytes_sent": sent * steps,
            "bytes_recv": received * steps,
        }
        for r, (sent, received) in zip(sampled, bytes_of, strict=True)
    ]
    log.overrides = {
        "nodes": size,
        **({"per_node_every": every} if every > 1 else {}),  # as `RunLog.sample_per_node`
        **{k: float(np.mean(v)) for k, v in totals.items()},
        "bytes_sent": sent_per_step * steps,
        "bytes_per_iteration": float(sent_per_step),
    }
