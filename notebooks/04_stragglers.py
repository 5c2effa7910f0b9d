# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 4. Stragglers and the cost of synchrony
#
# ## The study as it was (a blog post)
# It argues from a model, with no experiment of its own: data parallelism communicates gradients;
# a step costs compute + bytes / bandwidth + latency; a synchronous step waits for its slowest
# worker; model sizes are examples (ResNet-50: 25 M parameters). This notebook runs that model
# three ways (below) rather than substituting for an experiment.
#
# ## The model, and what runs it
# The study prices a step's communication as bytes / bandwidth + latency and argues
# that a synchronous step is as slow as its slowest node: if each node's compute step is S times
# slower with probability q, a step of p nodes is slowed with probability 1 − (1 − q)^p, so the
# expected time per iteration is
#
#     T(p) = c · (1 + (S − 1) · (1 − (1 − q)^p)) + 2(p − 1)(α + n / (p β))
#
# (c the compute of one step, the ring allreduce of n bytes on the α-β model). Here: the formula,
# the simulator (`sim.run --stragglers q:S`, closed-form ring allreduce), and, as root, a
# measurement on an emulated cluster (`real.cluster`) in which one host gets half a core.
#
# Full size: `python notebooks/04_stragglers.py`; `TWINSGD_SMOKE=1` takes fewer nodes and steps.

# %%
import csv
import os
import shutil
import tempfile
from pathlib import Path

from twinsgd.programs.collectives import alpha_beta_time
from twinsgd.programs.ghost import ghost_model
from twinsgd.analysis.study import (
    SMOKE,
    Verdict,
    emulated_cluster,
    figure,
    figures_folder,
    markdown,
    measure,
    simulate_point,
    verdict_table,
)

NODES = [2, 8, 32] if SMOKE else [2, 4, 8, 16, 32, 64, 128, 256]
ITERATIONS = 100 if SMOKE else 2000
Q, SLOWDOWN = 0.02, 4.0
GHOST = "resnet18"  # size-only payloads of ResNet-18 (CIFAR): 45 MB of float32 per allreduce
PARAMS = ghost_model(GHOST)[0].n_params
ALPHA_S, BETA_BPS = 5e-6, 1.25e9  # 5 us, 10 Gbit/s
work = Path(tempfile.mkdtemp(prefix="study4-"))
# Polus-like for its FLOP rate; the network is the formula's flat star, one rank a host
common = ["--algorithm", "allreduce", "--ghost", GHOST, "--profile", "polus-like",
          "--ranks-per-host", "1",
          "--collectives", "closed-form", "--latency", "5us", "--bandwidth", "10Gbps",
          "--no-measure-wait", "--iterations", str(ITERATIONS), "--seed", "1"]

# %% [markdown]
# c, the compute of one step, is the simulator's own: one node without stragglers.

# %%
solo = simulate_point(1, [*common, "--algorithm", "serial"], work / "solo")
c = solo["compute_s"] / ITERATIONS
print(f"c = {1e3 * c:.3f} ms per step ({GHOST}, {PARAMS:,} parameters, Polus-like FLOP rate)")


def formula(p):
    """T(p), seconds per iteration."""
    slowed = 1 - (1 - Q) ** p
    return c * (1 + (SLOWDOWN - 1) * slowed) + alpha_beta_time("ring", 4 * PARAMS, p, ALPHA_S,
                                                                  BETA_BPS, itemsize=4)


def slowed_fraction(folder):
    """The fraction of iterations in which some node's compute was a straggler's (> 1.5 c),
    from the run's steps.csv: the sample the simulator drew."""
    slowest = {}
    with open(folder / "steps.csv", newline="") as f:
        for row in csv.DictReader(f):
            it = int(row["iteration"])
            slowest[it] = max(slowest.get(it, 0.0), float(row["compute_s"]))
    return sum(t > 1.5 * c for t in slowest.values()) / len(slowest)


rows, errors, exact, comm_errors = [], [], [], []
for p in NODES:
    folder = work / f"sim-{p}"
    s = simulate_point(p, [*common, "--stragglers", f"{Q}:{SLOWDOWN}x"], folder)
    per_iteration = s["time_s"] / ITERATIONS
    comm = alpha_beta_time("ring", 4 * PARAMS, p, ALPHA_S, BETA_BPS, itemsize=4)
    drawn = slowed_fraction(folder)
    given_draws = c * (1 + (SLOWDOWN - 1) * drawn) + comm  # T with the simulator's own sample
    errors.append(per_iteration / formula(p) - 1)
    exact.append(per_iteration / given_draws - 1)
    comm_errors.append(abs(s["comm_s"] / ITERATIONS / comm - 1))
    rows.append([p, f"{1 - (1 - Q) ** p:.3f}", f"{drawn:.3f}", f"{1e3 * formula(p):.1f}",
                 f"{1e3 * per_iteration:.1f}", f"{100 * errors[-1]:+.1f} %",
                 f"{exact[-1]:+.1e}", f"{1e3 * comm:.3f}", f"{1e3 * s['comm_s'] / ITERATIONS:.3f}"])
print(markdown(["nodes", "P(step slowed)", "fraction drawn", "T(p) formula, ms",
                "simulated, ms", "error", "error given the draws", "comm formula, ms",
                "comm simulated, ms"], rows))

# %% [markdown]
# ## Measured: one host at half a core
# On an emulated cluster of 2 hosts (1 Gbit/s links), an allreduce run with both hosts at a full
# core, then with host 1 held to half a core by a CFS quota: that host is a straggler at every
# step (q = 1, S ≈ 2 on the compute it does), so the formula predicts T = 2c + comm, with c and
# comm taken from the full-speed run.

# %%
def emulated(cpu, out):
    """real.train allreduce on 2 emulated hosts with cores ``cpu`` (e.g. "1,0.5")."""
    flags = ["--algorithm", "allreduce", "--iterations", "40" if SMOKE else "300",
             "--eval-every", "1000000"]
    with emulated_cluster("--hosts", "2", "--bandwidth", "1Gbit", "--cpu", cpu):
        return measure(2, flags, out, cluster=True)


can_emulate = os.geteuid() == 0 and shutil.which("ip") is not None
measured_row = None
if can_emulate:
    full, half = emulated("1,1", work / "real-full"), emulated("1,0.5", work / "real-half")
    steps = full["iterations"]
    c_real = max(full["per_node"]["compute_s"]) / steps
    comm_real = full["comm_s"] / steps
    predicted = 2 * c_real + comm_real
    observed = half["time_s"] / half["iterations"]
    measured_row = (predicted, observed, full["time_s"] / steps, c_real, comm_real)
    print(markdown(["run", "s per iteration"],
                   [["both hosts at a core", f"{full['time_s'] / steps:.5f}"],
                    ["host 1 at half a core (measured)", f"{observed:.5f}"],
                    ["formula 2c + comm", f"{predicted:.5f}"]]))
else:
    print("not measured: the emulated cluster needs root and iproute2")

# %% [markdown]
# ## Verdict

# %%
worst = max(abs(e) for e in errors)
worst_exact = max(abs(e) for e in exact)
verdicts = [
    Verdict("communication costs bytes / bandwidth + latency per message",
            "-", f"comm within {max(comm_errors):.0e} of 2(p−1)(α + n/(pβ)) at every p",
            "yes" if max(comm_errors) < 1e-9 else "no",
            "the ring allreduce of the α-β model: 2(p−1) messages of n/p bytes"),
    Verdict("a synchronous step is as slow as its slowest node: T(p) rises to S·c as p grows",
            "-", f"within {100 * worst:.1f} % of T(p) at p = {NODES[0]}..{NODES[-1]}; "
            f"{worst_exact:.0e} given the steps it drew",
            "yes" if worst_exact < 1e-6 else "no",
            f"{ITERATIONS} seeded steps: the fraction of slowed steps is a sample of "
            "1 − (1 − q)^p, so the mean is within sampling error of T(p)"),
]
if measured_row:
    predicted, observed, base, c_real, comm_real = measured_row
    close = abs(observed / predicted - 1) < 0.15
    verdicts.append(Verdict(
        "one slow node slows every synchronous step",
        f"{observed / base:.2f}x the full-speed step", f"formula {predicted / base:.2f}x",
        "yes" if close else "partly",
        f"c = {1e3 * c_real:.2f} ms, comm = {1e3 * comm_real:.2f} ms per step" + (
            "" if close else f"; {1e3 * (observed - predicted):.2f} ms more per step than "
            "2c + comm: the quota also halves the CPU of the host's TCP stack and of the "
            "program's own code, which the formula counts as communication")))
print(verdict_table(verdicts))

# %% [markdown]
# ## Figures
# The simulated step split into compute, communication and waiting against the node count (the
# waiting is the stragglers'), and the first steps of the measured run with one host at half a
# core (the full-speed host waits in every step).

# %%
figures = figures_folder(work)
figure("breakdown", {f"p={p}": work / f"sim-{p}" for p in NODES}, figures / "04_breakdown.png")
if measured_row:
    figure("timeline", {"one host at half a core": work / "real-half"},
           figures / "04_timeline_half_core.png", steps=20)
print(f"figures in {figures}")
