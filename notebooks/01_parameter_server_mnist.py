# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 1. An MNIST parameter server in MPI and numpy: serial against 2, 3 and 5 processes
#
# ## The study as it was (a course report)
# - MNIST; the fully connected 784-200-50-10 network (ReLU, log-softmax, NLL loss); Adam; 2 epochs
#   (the loss stopped improving after the first); the batch size is not given.
# - One server and N - 1 workers: each worker computes a gradient on its batch, the server
#   averages the workers' gradients, updates and sends the weights back to every worker.
# - An Intel i5-9400 (6 cores), 16 GB, Python 3.8, `OMP_NUM_THREADS=1`, `mpirun -n 5`.
# - Serial 87 % test accuracy (the author suspects poor settings), parallel about the same;
#   68.58 s serial, 78.12 s on 2 processes, 62.50 s on 3 (speed-up 1.10). Proposed improvements:
#   the server computes too; workers compute while the server talks to another worker.
#
# ## What this notebook runs, and where it differs
# - The same data, model and optimizer, for 3 epochs, measured under `mpiexec` on this machine
#   and simulated by `sim.run` on a profile calibrated on it.
# - The server computes too (`--algorithm ps --server-computes`): the study's proposed
#   improvement, not what it ran. With a server that only serves, 2 processes are one worker and
#   the serial run's work plus the messages, which the study's 0.88x at 2 processes shows; here
#   every process trains on its shard and the speed-up asks what the processes add.
# - Batch 100 per process (the study does not say); the global batch grows with N. Speed-up is
#   the serial run's seconds per epoch over the N-process run's.
# - This machine has 2 cores, the study's 6: at 3 and 5 processes ranks share cores, which the
#   study's `mpirun -n 5` did not. The study's own speed-ups are set beside ours below.
#
# Full size: `python notebooks/01_parameter_server_mnist.py` (3 epochs of MNIST per point).
# `TWINSGD_SMOKE=1` runs 20 iterations per point.

# %%
import os
import tempfile
from pathlib import Path

from twinsgd.analysis.study import (
    SMOKE,
    Verdict,
    calibrate,
    figure,
    figures_folder,
    markdown,
    measure,
    simulate_point,
    verdict_table,
)

PROCESSES = [1, 2, 3, 5]
LENGTH = ["--iterations", "20"] if SMOKE else ["--epochs", "3"]
FLAGS = ["--dataset", "mnist", "--model", "mlp", "--batch-size", "100", "--seed", "0", *LENGTH]
work = Path(tempfile.mkdtemp(prefix="study1-"))
cores = os.cpu_count()
print(f"{cores} cores; run folders in {work}")

# %% [markdown]
# Calibrate: the network between two ranks and the real program's step times, into a profile
# the simulator reads (`one_machine`: ranks beyond the cores slow compute as measured).

# %%
profile = calibrate(work / "this-machine.toml")


def architecture(n):
    """The study's program on ``n`` processes: serial on one, else the computing server."""
    return ["--algorithm", "serial"] if n == 1 else ["--algorithm", "ps", "--server-computes"]


measured, simulated = {}, {}
for n in PROCESSES:
    flags = [*FLAGS, *architecture(n)]
    measured[n] = measure(n, flags, work / f"real-{n}")
    simulated[n] = simulate_point(n, [*flags, "--profile", str(profile), "--compute", "empirical"],
                            work / f"sim-{n}")

# %%
rows = []
for n in PROCESSES:
    m, s = measured[n], simulated[n]
    rows.append([n, f"{m['seconds_per_epoch']:.2f}", f"{s['seconds_per_epoch']:.2f}",
                 f"{measured[1]['seconds_per_epoch'] / m['seconds_per_epoch']:.2f}",
                 f"{simulated[1]['seconds_per_epoch'] / s['seconds_per_epoch']:.2f}",
                 f"{100 * m['final_test_accuracy']:.2f} %",
                 f"{100 * s['final_test_accuracy']:.2f} %"])
print(markdown(["processes", "s/epoch measured", "s/epoch simulated", "speed-up measured",
                "speed-up simulated", "accuracy measured", "accuracy simulated"], rows))

# %% [markdown]
# The study's own times (its machine, its server that does not compute), beside ours:

# %%
STUDY_S = {1: 68.58, 2: 78.12, 3: 62.50}  # the study's seconds for its whole run
print(markdown(["processes", "study: s", "study: speed-up", "ours measured: speed-up"],
               [[f"{n} (study's)", f"{STUDY_S[n]:.2f}", f"{STUDY_S[1] / STUDY_S[n]:.2f}",
                 f"{measured[1]['seconds_per_epoch'] / measured[n]['seconds_per_epoch']:.2f}"]
                for n in STUDY_S if n in measured]))

# %% [markdown]
# ## Verdict

# %%
best_n = max(PROCESSES, key=lambda n: measured[1]["seconds_per_epoch"]
             / measured[n]["seconds_per_epoch"])
speedup_m = measured[1]["seconds_per_epoch"] / measured[best_n]["seconds_per_epoch"]
speedup_s = simulated[1]["seconds_per_epoch"] / simulated[best_n]["seconds_per_epoch"]
most = PROCESSES[-1]  # the most processes: beyond the cores on this machine
over_m = measured[1]["seconds_per_epoch"] / measured[most]["seconds_per_epoch"]
over_s = simulated[1]["seconds_per_epoch"] / simulated[most]["seconds_per_epoch"]
accuracy_m = min(measured[n]["final_test_accuracy"] for n in PROCESSES)
accuracy_s = min(simulated[n]["final_test_accuracy"] for n in PROCESSES)
print(verdict_table([
    Verdict("more processes train an epoch faster",
            f"best {speedup_m:.2f}x at {best_n} processes",
            f"{speedup_s:.2f}x at {best_n}",
            "yes" if speedup_m > 1.1 else "no",
            f"{cores} cores: processes beyond them share a core, so the speed-up stops at the "
            "core count"),
    Verdict(f"(ours) the simulator predicts {most} processes on {cores} cores",
            f"{over_m:.2f}x", f"{over_s:.2f}x",
            "yes" if abs(over_s / over_m - 1) <= 0.25 else "no",
            "the simulated ranks take turns of the measured slice on the cores and a rank that "
            "waits gives its core up, as MPICH's Recv does (real.train waits in a yielding "
            "loop, not MPI's Probe, which kept the core); from run to run this machine's "
            "speed moves the points by 10-30 % (docs/validation.md: the parameter server "
            "past the cores)"
            if cores < most else
            "every process has its own core"),
    Verdict("about 87 % test accuracy at every process count",
            f"lowest {100 * accuracy_m:.2f} %", f"lowest {100 * accuracy_s:.2f} %",
            "yes" if accuracy_m >= 0.87 else "no",
            "smoke size trains 20 iterations only" if SMOKE else
            "synchronous PS is serial SGD with the global batch; accuracy follows the epochs"),
]))

# %% [markdown]
# ## Figures
# Simulated against measured seconds per iteration (past the core count the points leave the
# band), and every run's step split into compute, communication and waiting.

# %%
figures = figures_folder(work)
figure("predicted", {f"{n} process(es)": (work / f"real-{n}", work / f"sim-{n}")
                     for n in PROCESSES}, figures / "01_predicted.png", band=0.25)
figure("breakdown", {f"{n} {side}": work / f"{prefix}-{n}" for side, prefix in
                     (("measured", "real"), ("simulated", "sim")) for n in PROCESSES},
       figures / "01_breakdown.png")
print(f"figures in {figures}")
