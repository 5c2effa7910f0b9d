# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 3. The Lomonosov-2 study's ten configurations
#
# ## The study as it was (an MSU thesis)
# - CIFAR-10 and CIFAR-100, a small CNN (chosen for its simplicity and size; 100 outputs for
#   CIFAR-100), 50 epochs, batch 100, learning rate 0.0001, fixed seeds.
# - Ten configurations: Local-SGD(p), p = 1, 4, 16, with allreduce, with gossip, and with gossip
#   and threshold sparsification (threshold 1, which dropped 95 % of the gradient's values), and
#   Local-SGD(32) with allreduce. Gossip partners at step s: (i + s) mod P and (i - s + P) mod P.
# - Measured: total training time, communication time, synchronisation (communication and
#   waiting).
# - IBM Polus (nodes of 2 x 10-core POWER8; 16, 32 and 60 cores on up to 3 nodes) and
#   Lomonosov-2 (nodes of one 14-core Xeon E5-2697 v3, InfiniBand FDR; 32, 60 and 210 cores on 3,
#   5 and 15 nodes); one MPI rank per core.
# - Conclusions: Local-SGD speeds communication markedly for 2–4 % of accuracy; gossip 2–5x for
#   about 2 %; sparsification on top another 2–10x (up to 20x); Local-SGD(16) + gossip +
#   sparsification is best, about 40x faster communication for 1–3 %; on Polus no real speed-up
#   of training (communication is a small share there), on Lomonosov-2 training 2–3x faster;
#   synchronisation can take longer than computation even on homogeneous nodes.
#
# ## What this notebook runs, and where it differs
# Two variants; `TWINSGD_STUDY3=quick` picks the second.
#
# **The study's (the default).** Its model, batch, rate and scales, simulated; its data where
# this machine has it:
# - Data: CIFAR-10 where `TWINSGD_DATA` holds its binaries; otherwise, as on the machine these
#   results were made on (no CIFAR-10, no internet), `cifar10-substitute`: Fashion-MNIST padded
#   to 32x32 and repeated over 3 channels (`twinsgd.data.substitute`), the same format and class
#   count. CIFAR-100 is not run (the same model with 100 outputs; nothing here to train it on).
#   The tables print which data set ran; accuracies on the substitute are Fashion-MNIST's, so
#   the "accuracy lost" verdicts on it are not CIFAR-10's.
# - Model: our numpy `cnn` on 32x32x3 input: two 5x5 convolutions (16 and 32 channels, each with
#   2x2 max pooling and ReLU) and one dense layer to 10 classes, 34,538 parameters. The study
#   says only "small and simple, chosen for its size"; this is the smallest CNN the project has
#   (two 5x5 convolutions with pooling and a classifier, the shape of the usual CIFAR tutorial
#   networks), and it is small in the way that matters here: a 138 KB gradient, so
#   communication is a small share of a step on InfiniBand, as the study found on Polus.
# - Batch 100 per rank, learning rate 0.0001, constant, seed 0. The study's optimizer is not
#   recorded (`../shared/STUDIES.md`); we use Adam, for which 0.0001 is the usual rate on small
#   CIFAR CNNs (plain SGD at 0.0001 barely moves in the steps we can afford; see below).
# - Scales: the Polus-like preset at 16, 32 and 60 ranks (20 a node: 1, 2 and 3 nodes) and the
#   Lomonosov-2-like preset at 32, 60 and 210 ranks (14 a node: 3, 5 and 15 nodes), each preset's
#   `ranks_per_host`; ranks of one node talk through its memory and share its NIC.
# - Length: 32 steps per rank instead of 50 epochs. 32 steps is the least at which every
#   configuration exchanges (Local-SGD(32) once); the communication and training speed-ups are
#   per step, so they do not depend on the length, but the accuracies after 32 steps are early
#   ones (about 1 epoch at 16 ranks), and the accuracy-lost verdicts say so.
# - Times from a ghost, accuracies from real gradients. The simulator computes a run's real
#   gradients in this one process, every rank's: the ten at the six points are 131,200 CNN
#   gradients of 100 images, about two hours on this machine's 2 cores. Simulated time does not
#   need them: the presets charge a step's compute from the model's FLOPs, and the wire carries
#   the gradient's bytes, whatever their values. So the seven configurations without a
#   threshold are timed at all six points with `--ghost cnn-cifar`, a ghost of our cnn with its
#   34,538 parameters and its FLOPs (`models.profiles`); a ghost run gives the same simulated
#   time, compute, communication, waiting and bytes as the real cnn, step for step
#   (`tests/test_ghost_cnn.py`, and printed below where both ran). Real gradients run where a
#   number needs values:
#   - the ten at Polus-like, 16 ranks: every simulated accuracy below comes from there (the
#     accuracy-lost column is "-" elsewhere), and its seven ghost-timed configurations are
#     checked against their real runs;
#   - the three with a threshold at every point: what a threshold sends depends on the
#     gradient's values, so a ghost cannot run it (sim.run refuses `--compress` with `--ghost`);
#     their 31,680 real gradients at 60 and 210 ranks are most of this notebook's time.
#   The measured side (below) trains the real cnn throughout.
# - Threshold 0.0015 where the study had 1, chosen as the study's was described: it drops about
#   95 % of the values. What a threshold drops depends on the optimizer and the model: with Adam
#   at 0.0001 each weight moves about 0.0001 a step, and CHOCO's gossip sends a weight's change
#   once it has grown past the threshold. At Polus-like, 4 ranks, 32 steps (a sim.run with real
#   gradients), thresholds 0.0001 / 0.0005 / 0.001 / 0.0015 / 0.002 sent 95 / 27 / 15 / 9.2 /
#   5.6 % of plain gossip's bytes (values and their indices, 8 bytes an entry against 4: 9.2 %
#   of the bytes is 4.6 % of the values). The table prints the share saved at each point.
# - The measured side: as root, the ten with the same model and data on an emulated cluster of 4
#   hosts (network namespaces, 1 Gbit/s and 100 Mbit/s links; `real.cluster`), each predicted
#   first on that network's own calibration: Polus and Lomonosov-2 are not here to measure.
#
# **Quick (`TWINSGD_STUDY3=quick`).** The earlier version: the MNIST 784-200-50-10 MLP at batch
# 32, one epoch, Adam at its default rate, threshold 0.01 (about 99 % of that MLP's values
# dropped at the first step), on the two presets and on a slow network (the Lomonosov-2-like
# compute behind 1 Gbit/s Ethernet, 50 µs) at 16, 32, 60 and 210 ranks. Minutes, not hours; not
# the study's model.
#
# "Communication speed-up" is the baseline's (Local-SGD(1), allreduce) communication seconds per
# rank over the configuration's, for the same steps; "training speed-up" the same for the total.
#
# Full size: `python notebooks/03_lomonosov2_ten_configurations.py` (the study's variant, about
# 25 minutes on 2 cores as root, estimated from timed parts; without the ghost, about 2 hours);
# `TWINSGD_STUDY3=quick python notebooks/03_lomonosov2_ten_configurations.py` (1,161 s when last
# run; real gradients throughout, there is no ghost of the MLP). `TWINSGD_SMOKE=1`: the study's
# variant at 4 ranks on each preset (the same split of ghost and real gradients), 8 steps, and 2
# emulated hosts on the fast network only.

# %%
import os
import shutil
import sys
import tempfile
from pathlib import Path

from twinsgd.analysis.recommend import rank
from twinsgd.analysis.study import (
    SMOKE,
    Verdict,
    calibrate,
    cifar10_data,
    emulated_cluster,
    figure,
    figures_folder,
    lomonosov_configurations,
    markdown,
    measure,
    simulate_points,
    verdict_table,
)

QUICK = os.environ.get("TWINSGD_STUDY3") == "quick"
if os.environ.get("TWINSGD_STUDY3") not in (None, "", "quick", "study"):
    sys.exit(f"TWINSGD_STUDY3 must be 'study' or 'quick', got {os.environ['TWINSGD_STUDY3']!r}")
work = Path(tempfile.mkdtemp(prefix="study3-"))
print(f"run folders in {work}")
POLUS, LOMONOSOV = ["--profile", "polus-like"], ["--profile", "lomonosov-2-like"]
if QUICK:  # the MNIST MLP: minutes
    DATA, MODEL = ["--dataset", "mnist"], ["--model", "mlp", "--batch-size", "32"]
    THRESHOLD, CALIBRATED = "0.01", "mlp"
    LENGTH = ["--iterations", "30"] if SMOKE else ["--epochs", "1"]
    TARGET, EVAL_EVERY = (0.6, 3) if SMOKE else (0.9, 25)
    NODES = [16] if SMOKE else [16, 32, 60, 210]
    CLUSTERS = {
        "Polus-like": (POLUS, NODES),
        "Lomonosov-2-like": (LOMONOSOV, NODES),
        "slow (1 Gbit/s, 50 µs)": ([*LOMONOSOV, "--network", "star", "--bandwidth", "1Gbps",
                                    "--latency", "50us"], NODES),
    }
else:  # the study's model, batch, rate and scales (see above)
    DATA, data_name = cifar10_data(work)
    print(f"CIFAR-format data: {data_name}")
    MODEL = ["--model", "cnn", "--batch-size", "100", "--optimizer", "adam", "--lr", "0.0001",
             "--lr-schedule", "constant"]
    THRESHOLD, CALIBRATED = "0.0015", "cnn"
    STEPS = 8 if SMOKE else 32  # per rank: Local-SGD(32) exchanges once at full size
    LENGTH = ["--iterations", str(STEPS)]
    TARGET, EVAL_EVERY = (0.2, 4) if SMOKE else (0.4, 8)
    CLUSTERS = {  # the study's rank counts, each preset's ranks a node
        "Polus-like": (POLUS, [4] if SMOKE else [16, 32, 60]),
        "Lomonosov-2-like": (LOMONOSOV, [4] if SMOKE else [32, 60, 210]),
    }
CONFIGURATIONS = lomonosov_configurations(THRESHOLD)
COMMON = [*DATA, *MODEL, "--seed", "0", *LENGTH, "--target-accuracy", str(TARGET),
          "--eval-every", str(EVAL_EVERY)]
EMULATED = {"fast (1 Gbit/s)": "1Gbit", "slow (100 Mbit/s)": "100Mbit"}
if SMOKE and not QUICK:  # a CNN run's start and evaluation cost seconds: one network only
    EMULATED = {"fast (1 Gbit/s)": "1Gbit"}
HOSTS = 2 if SMOKE else 4
BASELINE = CONFIGURATIONS[0][0]

# %%
THRESHOLDED = [name for name, flags in CONFIGURATIONS if "--compress" in flags]
FEWEST = {cluster: nodes[0] for cluster, (_, nodes) in CLUSTERS.items()}
ACCURACY_AT = next(iter(FEWEST.items()))  # Polus-like at its fewest ranks
GHOST = None if QUICK else "cnn-cifar"  # the ghost of our cnn (models.profiles); quick: none


def with_gradients(cluster, n, name):
    """Whether the point runs real gradients: all of the quick variant's; in the study's, the
    ten at ACCURACY_AT (its accuracies) and the thresholded three everywhere (what a threshold
    sends depends on the values, which a ghost does not have)."""
    return GHOST is None or (cluster, n) == ACCURACY_AT or name in THRESHOLDED


runs = {}  # (source, cluster, ranks, configuration) -> (ranks, flags, run folder)
for cluster, (cluster_flags, nodes) in CLUSTERS.items():
    for n in nodes:
        for name, flags in CONFIGURATIONS:
            sim_flags = [*COMMON, *flags, *cluster_flags, "--compute", "profile",
                         "--collectives", "closed-form"]
            if with_gradients(cluster, n, name):
                runs["gradients", cluster, n, name] = (n, sim_flags, work / f"sim-{len(runs)}")
            if GHOST and name not in THRESHOLDED:
                runs["ghost", cluster, n, name] = (n, [*sim_flags, "--ghost", GHOST],
                                                   work / f"ghost-{len(runs)}")
# at full size the points run on a pool of this machine's cores (simulated times are the same);
# the real-gradient runs (tens of seconds each) first, the ghosts (about a second) after them
order = sorted(runs, key=lambda key: key[0] == "ghost")
done = dict(zip(order, simulate_points([runs[k] for k in order], workers=1 if SMOKE else None),
                strict=True))
# times and bytes: the ghost's where it ran, else the real gradients'; accuracies: real only
simulated, sim_folders, accuracies = {}, {}, {}
for (source, *point), summary in sorted(done.items(), key=lambda kv: kv[0][0] == "ghost"):
    simulated[tuple(point)], sim_folders[tuple(point)] = summary, runs[source, *point][2]
    if source == "gradients":
        accuracies[tuple(point)] = summary
WHERE = [(c, n) for c, (_, nodes) in CLUSTERS.items() for n in nodes]
if GHOST:  # the substitution, checked where both ran: the same simulated times and bytes
    TIMED = ("time_s", "compute_s", "comm_s", "wait_s", "bytes_sent")
    both = [name for name, _ in CONFIGURATIONS if ("ghost", *ACCURACY_AT, name) in done]
    equal = [name for name in both
             if all(done["ghost", *ACCURACY_AT, name][k] == done["gradients", *ACCURACY_AT, name][k]
                    for k in TIMED)]
    apart = max((abs(done["ghost", *ACCURACY_AT, name]["time_s"]
                     / done["gradients", *ACCURACY_AT, name]["time_s"] - 1)
                 for name in both if name not in equal), default=0.0)
    print(f"{ACCURACY_AT[0]}, {ACCURACY_AT[1]} ranks: the ghost {GHOST} and the real cnn give "
          f"equal simulated time, compute, communication, wait and bytes in {len(equal)} of "
          f"{len(both)} configurations" + ("" if len(equal) == len(both) else
          f"; in the others the times are {100 * apart:.4f} % apart at most: the real runs "
          f"evaluate every {EVAL_EVERY} steps, a rendezvous that lines up the gossiping nodes, "
          "and a ghost has nothing to evaluate before its last step"))


def speedups(results, where, accuracy=None):
    """Per configuration run at ``where`` (cluster and size): (communication speed-up, training
    speed-up, accuracy lost in points or None) against the baseline of the same ``where``; the
    accuracies from ``accuracy`` (default ``results``), None where it lacks the run or the
    baseline."""
    accuracy = results if accuracy is None else accuracy

    def final(name):  # None for a run not made with real gradients (a ghost's is None)
        return (accuracy.get((*where, name)) or {}).get("final_test_accuracy")

    base, base_acc = results[(*where, BASELINE)], final(BASELINE)
    out = {}
    for name, _ in CONFIGURATIONS:
        s, acc = results.get((*where, name)), final(name)
        if s is None:
            continue
        lost = None if acc is None or base_acc is None else 100 * (base_acc - acc)
        out[name] = (base["comm_s"] / max(s["comm_s"], 1e-12), base["time_s"] / s["time_s"], lost)
    return out


def points_lost(x):
    return "-" if x is None else f"{x:+.2f}"


DATA_NAME = "mnist" if QUICK else data_name
for cluster, n in WHERE:
    table = speedups(simulated, (cluster, n), accuracies)
    source = "real gradients" if GHOST is None else \
        "times of the ghost and, where run, real gradients" if (cluster, n) == ACCURACY_AT else \
        "times of the ghost, the thresholded three of real gradients"
    print(f"\n{cluster}, {n} ranks (simulated: {source}; accuracies on {DATA_NAME})")
    print(markdown(["configuration", "comm speed-up", "training speed-up",
                    "accuracy lost, points"],
                   [[k, f"{c:.1f}x", f"{t:.2f}x", points_lost(a)]
                    for k, (c, t, a) in table.items()]))

# %% [markdown]
# ## Measured on an emulated cluster (root only)
# On each emulated network: calibrate it (`real.calibrate` on 2 of its hosts), predict the ten
# on that profile with measured step times (`--compute empirical`) and rank them by predicted
# time to the target, as `twinsgd.analysis.recommend` does (the ten predictions on a pool of
# 2 processes, before anything is measured); then measure the ten, one at a time.

# %%
def emulated(rate):
    """The ten on ``HOSTS`` emulated hosts with links of ``rate``: (measured summaries, the
    predicted ranking) by configuration."""
    with emulated_cluster("--hosts", str(HOSTS), "--bandwidth", rate):
        profile = calibrate(work / f"emulated-{rate}.toml", cluster=True, models=CALIBRATED,
                            data=DATA)
        # the ten predictions on a pool of this machine's cores (their simulated times do not
        # depend on it), before anything is measured
        predictions = simulate_points(
            [(HOSTS, [*COMMON, *flags, "--profile", str(profile), "--compute", "empirical"],
              work / f"predicted-{rate}-{i}") for i, (name, flags) in enumerate(CONFIGURATIONS)],
            workers=1 if SMOKE else None)
        predicted = rank([(name, flags, s, "done")
                          for (name, flags), s in zip(CONFIGURATIONS, predictions, strict=True)])
        return {(rate, name): measure(HOSTS, [*COMMON, *flags], work / f"real-{rate}-{i}",
                                      cluster=True)
                for i, (name, flags) in enumerate(CONFIGURATIONS)}, predicted


measured, recommended = {}, {}
if os.geteuid() == 0 and shutil.which("ip"):
    for label, rate in EMULATED.items():
        summaries, recommended[label] = emulated(rate)
        measured.update({(label, *k[1:]): v for k, v in summaries.items()})
        table = speedups(measured, (label,))
        print(f"\n{label}, {HOSTS} emulated hosts (measured)")
        print(markdown(["configuration", "comm speed-up", "training speed-up",
                        "accuracy lost, points"],
                       [[k, f"{c:.1f}x", f"{t:.2f}x", points_lost(a)] for k, (c, t, a)
                        in table.items()]))
else:
    print("not measured: the emulated cluster needs root and iproute2")

# %% [markdown]
# ## Verdict
# Each conclusion is checked on every simulated (cluster, nodes) and measured network; the
# columns give the range over them, and "reproduced" is yes when every one of them is in the
# study's range, partly when some are.

# %%
def span(values, fmt):
    values = list(values)
    if not values:
        return "not measured"
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def ranges(results, wheres, pick, accuracy=None):
    """``pick`` of each ``where``'s speed-up table, leaving out the points where it is None
    (a configuration not simulated there, an accuracy not computed there)."""
    values = [pick(speedups(results, where, accuracy)) for where in wheres]
    return [v for v in values if v is not None]


sim_where = WHERE
real_where = [(label,) for label in EMULATED if (label, BASELINE) in measured]
gossip_vs = ("Local-SGD(1), gossip", BASELINE)
sparse_vs = ("Local-SGD(1), gossip + threshold", "Local-SGD(1), gossip")
combo = "Local-SGD(16), gossip + threshold"


def ratio(a, b):
    return lambda t: t[a][0] / t[b][0] if a in t and b in t else None


def comm(name):
    return lambda t: t[name][0] if name in t else None


def lost(name):
    return lambda t: t[name][2] if name in t else None


def check(results, wheres, accuracy=None):
    local = ranges(results, wheres, comm("Local-SGD(4), allreduce"))
    local_acc = ranges(results, wheres, lost("Local-SGD(16), allreduce"), accuracy)
    gossip = ranges(results, wheres, ratio(*gossip_vs))
    sparse = ranges(results, wheres, ratio(*sparse_vs))
    combined = ranges(results, wheres, comm(combo))
    combined_acc = ranges(results, wheres, lost(combo), accuracy)
    best = ranges(results, wheres, lambda t: max(v[1] for v in t.values()))
    return local, local_acc, gossip, sparse, combined, combined_acc, best


sim, real = check(simulated, sim_where, accuracies), check(measured, real_where)


def holds(values, lo, hi=float("inf")):
    return "not measured" if not values else \
        "yes" if all(lo <= v <= hi for v in values) else \
        "partly" if any(lo <= v <= hi for v in values) else "no"


fast_best = [max(v[1] for v in speedups(measured, (label,)).values())
             for label in EMULATED if "fast" in label and (label, BASELINE) in measured]
slow_best = [max(v[1] for v in speedups(measured, (label,)).values())
             for label in EMULATED if "slow" in label and (label, BASELINE) in measured]
# the study: no real training speed-up on Polus, 2-3x on Lomonosov-2; the quick variant holds
# both presets to the first and its slow network to the second
FAST = ["Polus-like"] if not QUICK else ["Polus-like", "Lomonosov-2-like"]
sim_fast = [max(v[1] for v in speedups(simulated, (c, n)).values())
            for c, n in WHERE if c in FAST]
sim_slow = [max(v[1] for v in speedups(simulated, (c, n)).values())
            for c, n in WHERE if c not in FAST]


def bytes_saved(results, where):
    """The share of gossip's bytes the threshold did not send, at Local-SGD(1), in %."""
    plain = results[(*where, "Local-SGD(1), gossip")]["bytes_sent"]
    return 100 * (1 - results[(*where, sparse_vs[0])]["bytes_sent"] / max(plain, 1))


saved_sim = [bytes_saved(simulated, w) for w in sim_where if (*w, sparse_vs[0]) in simulated]
saved_real = [bytes_saved(measured, w) for w in real_where]
# accuracy verdicts are the study's only on its data and length; say which ran
ACCURACY_NOTE = ("" if not QUICK and data_name == "cifar10" else
                 f" (on {DATA_NAME}: not CIFAR-10's accuracy)")
ACCURACY_NOTE += "" if QUICK else f"; after {STEPS} steps, not 50 epochs"
# the study's variant: where the simulated column's real gradients ran (see above)
AT_ACCURACY = "" if QUICK else \
    f"; simulated at {ACCURACY_AT[0]}, {ACCURACY_AT[1]} ranks only (real gradients)"


def recommendation_check(label):
    """(measured fastest to the target, its time, the recommended one, its measured time)."""
    reached = {name: measured[label, name]["time_to_target_s"]
               for name, _ in CONFIGURATIONS
               if measured[label, name]["time_to_target_s"] is not None}
    pick = recommended[label][0][0]
    fastest = min(reached, key=reached.get) if reached else None
    return fastest, reached.get(fastest), pick, reached.get(pick)


checks = {label: recommendation_check(label) for label in recommended}


def seconds(t):
    """A time to the target as printed: '-' when the run never reached it."""
    return "-" if t is None else f"{t:.3g} s"


for label, (fastest, t_fast, pick, t_pick) in checks.items():
    print(f"{label}: measured fastest to {100 * TARGET:.0f} %: {fastest} ({seconds(t_fast)}); "
          f"recommended: {pick} (measured {seconds(t_pick)})")
within = [t_pick / t_fast for _, t_fast, _, t_pick in checks.values() if t_fast and t_pick]
recommendation = Verdict(
    "(ours) twinsgd.analysis.recommend picks the measured fastest, or one within 10 %",
    span(within, "{:.2f}x the fastest"), "ranked on each network's calibrated profile",
    "not measured" if not checks else "yes" if len(within) == len(checks) and
    max(within) <= 1.10 else "no",
    "predicted times to the target on the emulated network's own calibration")

print(verdict_table([
    recommendation,
    Verdict("Local-SGD(4) speeds communication", span(real[0], "{:.1f}x"),
            span(sim[0], "{:.1f}x"), holds(sim[0] + real[0], 1.5),
            "it exchanges once per 4 steps: at most 4x"),
    Verdict("Local-SGD costs 2–4 % accuracy (Local-SGD(16))", span(real[1], "{:+.1f}"),
            span(sim[1], "{:+.1f}"), holds(sim[1] + real[1], 2, 4),
            "points lost against the baseline after the same steps" + ACCURACY_NOTE + AT_ACCURACY),
    Verdict("gossip speeds communication 2–5x", span(real[2], "{:.1f}x"),
            span(sim[2], "{:.1f}x"), holds(sim[2] + real[2], 2, 5),
            "one partner per step instead of the ring's 2(p−1) messages"),
    Verdict("the threshold drops about 95 % of what gossip sends (threshold 1)",
            span(saved_real, "{:.0f} %"), span(saved_sim, "{:.0f} %"),
            holds(saved_sim + saved_real, 90, 99),
            f"bytes not sent at Local-SGD(1) with threshold:{THRESHOLD} (values and indices)"),
    Verdict("sparsification on top speeds it another 2–10x", span(real[3], "{:.1f}x"),
            span(sim[3], "{:.1f}x"), holds(sim[3] + real[3], 2, 20),
            f"threshold:{THRESHOLD} sends values and indices of the entries above it"),
    Verdict("Local-SGD(16) + gossip + sparsification: about 40x", span(real[4], "{:.0f}x"),
            span(sim[4], "{:.0f}x"), holds(sim[4] + real[4], 20, 80),
            "the three multiply"),
    Verdict("… for 1–3 % of accuracy", span(real[5], "{:+.1f}"), span(sim[5], "{:+.1f}"),
            holds(sim[5] + real[5], 1, 3),
            "points lost against the baseline" + ACCURACY_NOTE + AT_ACCURACY),
    Verdict("Polus (fast network): no real training speed-up", span(fast_best, "{:.2f}x"),
            span(sim_fast, "{:.2f}x"), holds(sim_fast + fast_best, 0, 1.3),
            f"best training speed-up; simulated on {', '.join(FAST)}, measured at 1 Gbit/s"),
    Verdict("Lomonosov-2 (slow network): training 2–3x faster", span(slow_best, "{:.2f}x"),
            span(sim_slow, "{:.2f}x"), holds(sim_slow + slow_best, 2, 3),
            "best training speed-up; simulated on "
            f"{', '.join(c for c in CLUSTERS if c not in FAST)}, measured at 100 Mbit/s"),
]))

# %% [markdown]
# ## Figures
# The ten's time per iteration split into compute, communication and waiting, simulated on the
# last cluster at its most ranks (the study's variant: Lomonosov-2-like at 210, the seven the
# ghost times and the thresholded three of real gradients); and on each emulated network,
# measured against predicted.

# %%
figures = figures_folder(work)
names = [name for name, _ in CONFIGURATIONS]
slow, most = WHERE[-1]
figure("breakdown", {name: sim_folders[slow, most, name] for name in names
                     if (slow, most, name) in sim_folders},
       figures / "03_breakdown_simulated.png")
for rate in EMULATED.values() if measured else ():
    figure("breakdown", {name: work / f"real-{rate}-{i}" for i, name in enumerate(names)},
           figures / f"03_breakdown_{rate}.png")
    figure("predicted", {name: (work / f"real-{rate}-{i}", work / f"predicted-{rate}-{i}")
                         for i, name in enumerate(names)},
           figures / f"03_predicted_{rate}.png", band=0.25)
print(f"figures in {figures}")
