"""``sim.run --engine analytic``: a synchronous data-parallel run as numpy over the node axis.

Where every node runs the same synchronous program (``--algorithm allreduce``, one step per
synchronisation, size-only ``--ghost`` payloads, the ring), the event simulation with
``--collectives closed-form`` is fully determined by per-node compute times: in step k node i
computes ``c_i = (seconds_per_step + b * seconds_per_sample) * (straggle_i / speed_i)`` (the same
draws as the event engine, `ComputeModel.straggle_factors`), arrives at ``t + c_i``, and every
node leaves at ``t' = (t + max_i c_i) + T`` with ``T`` the ring's alpha-beta time
``2(p-1)(alpha + n/(p beta))`` (`programs.collectives.alpha_beta_time`). Node i's wait is
``(t' - T) - (t + c_i)``, its comm ``T``. This module computes exactly that, a step at a time
over arrays of p nodes, in the same floating-point operations as the event engine (tested equal
to it to 1e-9 at 1,000 nodes), at O(p) numpy work per step instead of O(p) SimPy events: a
million nodes for 100 steps in seconds.

The run folder is the event engine's: config.json (``"engine": "analytic"``), metrics.csv at the
evaluation steps (a ghost evaluates to nothing: NaN), steps.csv for every ``--steps-sample``-th
node (by default so that about 1,000 nodes are written), and summary.json with means over all
nodes and ``per_node`` over the sampled ones (``per_node_every`` says which).
"""

import math

import numpy as np

from twinsgd.programs.collectives import allreduce_bytes, alpha_beta_time
from twinsgd.programs.node import Step
from twinsgd.run.runlog import RunLog


def check_analytic(cfg, cluster):
    """Raise ValueError naming the flag when the analytic engine cannot run this configuration
    (it models what it can compute exactly: the ghost allreduce on a star)."""
    needs = [
        (cluster.ghost is not None, "--ghost (size-only payloads: no weights per node)"),
        (cfg.algorithm in ("allreduce", "auto"), f"--algorithm allreduce, got {cfg.algorithm}"),
        (cfg.local_steps == 1, f"--local-steps 1, got {cfg.local_steps}"),
        (cfg.allreduce == "ring", f"--allreduce ring, got {cfg.allreduce}"),
        (cluster.network == "star", f"--network star, got {cluster.network}"),
        (
            not cluster.costs,
            "the network of --latency/--bandwidth, not a calibrated profile's measured costs",
        ),
        (not cluster.faults.faults, "no --faults or --fail"),
    ]
    for ok, need in needs:
        if not ok:
            raise ValueError(f"--engine analytic needs {need}")


def run_analytic(
    node,
    size,
    compute,
    latency_s,
    bandwidth_Bps,
    gamma,
    folder,
    header,
    target_accuracy,
    steps_sample=None,
):
    """Simulate the run of ``size`` copies of ``node`` (rank 0's: its schedule, model size and
    evaluation steps) whose ring steps cost ``latency_s + n / bandwidth_Bps`` (the slowest
    step's, `sim.cluster.Cluster.ring_link`); write the run folder; return the summary."""
    every = steps_sample
    sampled = np.arange(0, size, every)
    model, samples = node.model, node.cfg.batch_size
    nbytes, itemsize = model.n_params * 4, 4
    comm_s = alpha_beta_time("ring", nbytes, size, latency_s, bandwidth_Bps, itemsize, gamma)
    bytes_of = [allreduce_bytes("ring", model.n_params, itemsize, int(r), size) for r in sampled]
    sent_per_step = 2 * (size - 1) * nbytes if size > 1 else 0  # every chunk once per ring step
    base = compute.seconds_per_step + samples * compute.seconds_per_sample
    speeds = compute.node_speeds(size)
    per_epoch = node.steps_per_epoch
    header["cluster"]["steps_sample"] = every
    log = RunLog(folder, header, target_accuracy, per_epoch)
    totals = {"compute_s": np.zeros(size), "comm_s": np.zeros(size), "wait_s": np.zeros(size)}
    t = 0.0
    for step in range(1, node.total_steps + 1):
        slow = compute.straggle_factors(step, size) if compute.straggle_probability else 1.0
        seconds = base * (slow / speeds)  # (size,): as the event engine multiplies them
        arrived = t + seconds
        t_next = (t + float(seconds.max())) + comm_s
        wait = (t_next - comm_s) - arrived
        totals["compute_s"] += seconds
        totals["wait_s"] += wait
        totals["comm_s"] += comm_s
        epoch = (step - 1) // per_epoch
        log.steps.write_rows(
            [
                {
                    "rank": int(r),
                    "epoch": epoch,
                    "iteration": step,
                    "time_s": t_next,
                    "compute_s": float(seconds[r]),
                    "comm_s": comm_s,
                    "wait_s": float(wait[r]),
                    "bytes_sent": sent,
                    "bytes_recv": received,
                    "staleness": 0,
                    "loss": math.nan,
                }
                for r, (sent, received) in zip(sampled, bytes_of, strict=True)
            ]
        )
        t = t_next
        log.iterations, log.time_s = step, t
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
    _keep_totals(log, totals, sampled, bytes_of, node.total_steps, size, every, sent_per_step)
    log.finish("done")
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
        "per_node_every": every,
        **{k: float(np.mean(v)) for k, v in totals.items()},
        "bytes_sent": sent_per_step * steps,
        "bytes_per_iteration": float(sent_per_step),
    }
