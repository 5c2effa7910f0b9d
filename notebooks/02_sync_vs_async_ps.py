# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 2. Synchronous against asynchronous parameter server, 1 to 20 workers
#
# ## The study as it was (parameter servers on Ray)
# - CIFAR-10 (50,000 train / 10,000 test images, 32x32x3); a one-convolution CNN (best about 50 %)
#   and ResNet-18 (about 80 % on one node); SGD, batch 100 per worker, learning rate 0.0001,
#   10,000 iterations (asynchronous: 20,000, one push and update each), accuracy every 10.
# - 1, 2, 5, 10, 15, 20 workers (the CNN, synchronous only); 1, 5, 10, 15, 20 (ResNet-18, both).
# - Speed-up: the time to a target accuracy (40 % CNN, 60 % ResNet-18 sync, 55 % async) against
#   one worker's.
# - Findings: more workers converge faster per iteration (batch 100n) but iterations slow as the
#   slowest worker sets the pace; the CNN's speed-up peaks at 10 workers (over 4.0); ResNet-18
#   scales worse and is slower past 10; asynchrony gains fastest early and converges worse with
#   more workers (stale gradients); at 10 workers synchronous SGD wins after the start.
#
# ## What this notebook runs, and where it differs
# - The same architecture, measured and simulated: `--algorithm ps --mode sync` against
#   `--mode async` (one server, W workers, W + 1 processes) under `mpiexec` and on a profile
#   calibrated on this machine, with the same seeds.
# - MNIST and the 784-200-50-10 MLP instead of CIFAR-10 and its CNN or ResNet-18: CIFAR-10
#   cannot be downloaded on this machine, and the MLP trains a point in seconds on 2 cores. With
#   it: SGD at lr 0.1 and batch 32, so that it reaches a 90 % target within 600 steps a worker,
#   and W = 1, 2, 4, 8, 16, 20 (past 1 the W + 1 processes share 2 cores).
# - Every worker takes the same number of steps in both modes; a synchronous update averages W
#   gradients, an asynchronous one applies a single push, so gradients to the target are
#   updates × W (sync) against updates (async). The study's time-to-target speed-up, and its
#   models at their size, are the next step, not run here.
#
# Full size: `python notebooks/02_sync_vs_async_ps.py` (W = 1, 2, 4, 8, 16, 20; target 90 %).
# `TWINSGD_SMOKE=1`: W = 1, 2, 4 and a target of 60 %.

# %%
import os
import tempfile
from pathlib import Path

from twinsgd.analysis.study import (
    figure,
    figures_folder,
    SMOKE,
    Verdict,
    calibrate,
    iterations_to_target,
    markdown,
    measure,
    simulate_point,
    verdict_table,
)

WORKERS = [1, 2, 4] if SMOKE else [1, 2, 4, 8, 16, 20]
TARGET = 0.6 if SMOKE else 0.9
ITERATIONS = 40 if SMOKE else 600  # steps per worker: W x ITERATIONS gradients in both modes
FLAGS = ["--dataset", "mnist", "--model", "mlp", "--optimizer", "sgd", "--lr", "0.1",
         "--lr-schedule", "constant", "--batch-size", "32", "--seed", "0",
         "--target-accuracy", str(TARGET)]
work = Path(tempfile.mkdtemp(prefix="study2-"))
print(f"{os.cpu_count()} cores; run folders in {work}")
profile = calibrate(work / "this-machine.toml")

# %%
results = {}
for w in WORKERS:
    for mode in ("sync", "async"):
        # Each worker takes ITERATIONS steps in both modes: a synchronous update averages W
        # gradients, an asynchronous one applies one push, so async counts W times the updates.
        updates = ITERATIONS if mode == "sync" else ITERATIONS * w
        flags = [*FLAGS, "--algorithm", "ps", "--mode", mode, "--iterations", str(ITERATIONS),
                 "--eval-every", str(max(1, updates // 20))]
        sim_flags = [*flags, "--profile", str(profile), "--compute", "empirical"]
        real_dir, sim_dir = work / f"real-{mode}-{w}", work / f"sim-{mode}-{w}"
        results[mode, w] = (measure(w + 1, flags, real_dir), simulate_point(w + 1, sim_flags, sim_dir),
                            iterations_to_target(real_dir, TARGET),
                            iterations_to_target(sim_dir, TARGET))


def seconds(x):
    return "not reached" if x is None else f"{x:.2f}"


def gradients(mode, w, updates):
    """Gradients applied up to the target: W per synchronous update, one per push."""
    return "not reached" if updates is None else updates * (w if mode == "sync" else 1)


rows = []
for (mode, w), (m, s, it_m, it_s) in results.items():
    rows.append([w, mode, gradients(mode, w, it_m), gradients(mode, w, it_s),
                 seconds(m["time_to_target_s"]), seconds(s["time_to_target_s"]),
                 f"{100 * m['final_test_accuracy']:.2f} %",
                 f"{100 * s['final_test_accuracy']:.2f} %",
                 f"{m['wait_s']:.2f}", f"{s['wait_s']:.2f}"])
print(markdown(["workers", "mode", "gradients to target (measured)", "(simulated)",
                "s to target (measured)", "(simulated)", "final accuracy (measured)",
                "(simulated)", "wait s (measured)", "(simulated)"], rows))

# %% [markdown]
# ## Verdict
# Asynchrony "wins" at W workers when its time to the target is below the synchronous run's;
# staleness "costs" when it needs more gradients than the synchronous run to get there.

# %%
def time_to_target(mode, w, which):
    return results[mode, w][which]["time_to_target_s"]


def wins(which):
    return [w for w in WORKERS if time_to_target("async", w, which) is not None and (
        time_to_target("sync", w, which) is None
        or time_to_target("async", w, which) < time_to_target("sync", w, which))]


def stale_costs(which):
    """Worker counts at which asynchrony needed more gradients than synchrony to the target."""
    out = []
    for w in WORKERS:
        sync_it, async_it = results["sync", w][2 + which], results["async", w][2 + which]
        if sync_it is not None and (async_it is None or async_it > sync_it * w):
            out.append(w)
    return out


wins_m, wins_s = wins(0), wins(1)
costs_m, costs_s = stale_costs(0), stale_costs(1)
print(verdict_table([
    Verdict("asynchrony reaches the target sooner as workers are added",
            f"async faster at W = {wins_m or 'none'}", f"async faster at W = {wins_s or 'none'}",
            "yes" if wins_m and max(wins_m) == max(WORKERS) else "no",
            "on shared cores a synchronous step waits for the slowest of W time-shared "
            "workers; the asynchronous server serves each push as it comes"),
    Verdict("staleness costs accuracy per gradient",
            f"async needed more gradients at W = {costs_m or 'none'}",
            f"at W = {costs_s or 'none'}",
            "yes" if costs_m else "no",
            "a push computed on weights that are W−1 updates old moves the model less "
            "usefully than a fresh averaged step"),
]))

# %% [markdown]
# ## Figures
# Test accuracy against time at 4 workers, sync and async, measured and simulated; and simulated
# against measured seconds per iteration at every W (past the cores the measured ones run away).

# %%
figures = figures_folder(work)
w = 4 if 4 in WORKERS else WORKERS[-1]
figure("accuracy", {f"{mode} W={w} {side}": work / f"{prefix}-{mode}-{w}"
                    for mode in ("sync", "async")
                    for side, prefix in (("measured", "real"), ("simulated", "sim"))},
       figures / "02_accuracy.png")
figure("predicted", {f"{mode} W={w}": (work / f"real-{mode}-{w}", work / f"sim-{mode}-{w}")
                     for mode in ("sync", "async") for w in WORKERS},
       figures / "02_predicted.png", band=0.25)
print(f"figures in {figures}")
