"""This machine's twin held against itself: `real.osu` against `sim.osu` on the same minutes'
calibration, round after round.

Each round, on one allocation: `real.calibrate --quick`, then at once `real.osu` of osu_latency,
osu_allreduce and osu_bcast, and `sim.osu` of the same three on the round's profile; the median
|error| over sizes of each (`twinsgd.analysis.osu_compare`). Then `real.osu` measures the three
again, and the second measurement is held against the first the same way: how far the machine
is from itself a minute later, the floor under any prediction's error. Prints a row a round
and how many rounds are within 10 % for allreduce and bcast (issue 23's bound on this machine),
simulated and measured again. Rounds, not
one: this machine's copies and small TCP messages run at two speeds, and which one a launch
meets changes from minute to minute (docs/osu.md), so one round says little.

Where (``--where``, comma-separated):

- ``shm``: 2 ranks through this machine's shared memory (the venv's mpiexec);
- ``1Gbit``: 2 emulated 1 Gbit/s hosts, a rank each (`real.cluster`; root);
- ``2x2``: 2 emulated 1 Gbit/s hosts of 2 ranks each, 4 ranks on the machine's cores (root).

Each round also times the machine's phase three times (before the calibration, between it and
`real.osu`, after; `real.phase`), and on shared memory the calibration times it inside itself
too (its profile's ``[cluster] phase_us``, printed between the first two): this machine copies
through memory at two speeds, 3x apart, switching by itself, and a calibration in one phase
does not predict a measurement in the other. A round whose probes are all within 1.5x of each
other held its phase ("held"; `phase_held`); the summary counts those apart.

Run ``python benchmarks/osu_twin.py [--where shm,1Gbit,2x2] [--rounds 3] [--out DIR]`` (about
25 s a shared-memory round, 2 minutes an emulated one). The run's files (profiles, tables) stay
in ``--out`` (default: a temporary folder, removed).
"""

import argparse
import contextlib
import subprocess
import sys
import tempfile
from pathlib import Path

from twinsgd.analysis.launch import launch_command
from twinsgd.analysis.osu_compare import compare
from twinsgd.analysis.prediction_table import phase_held, profile_phase
from twinsgd.analysis.validate import probe_phase
from twinsgd.calibration.osu_tables import read_table

BENCHES = ("osu_latency", "osu_allreduce", "osu_bcast")
WITHIN = 0.10  # issue 23's bound on this machine: median |error| over sizes
PLACES = {"shm": (2, None), "1Gbit": (2, 2), "2x2": (4, 2)}  # ranks, emulated hosts
TIMEOUT_S = 600


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--where", default="shm", help="shm, 1Gbit, 2x2 (comma-separated)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None, help="keep the run's files here")
    args = parser.parse_args(argv)
    places = args.where.split(",")
    if unknown := [p for p in places if p not in PLACES]:
        parser.error(f"--where: unknown {', '.join(unknown)} (known: {', '.join(PLACES)})")
    with contextlib.ExitStack() as stack:
        out = Path(args.out or stack.enter_context(tempfile.TemporaryDirectory()))
        print(
            "| where | round | latency | allreduce | bcast | measured again: latency, "
            "allreduce, bcast | phase probes (us) |"
        )
        print("|---|---|---|---|---|---|---|")
        summary = []
        for place in places:
            medians = [_round(place, out / f"{place}-{k}", k) for k in range(1, args.rounds + 1)]
            summary.append((place, medians))
    print()
    for place, rounds in summary:
        _say_within(f"{place}, every round", rounds)
        _say_within(f"{place}, rounds that held their phase", [r for r in rounds if r["held"]])
    return 0


def _say_within(title, rounds):
    """Print how many of ``rounds`` have their allreduce and their bcast within `WITHIN`, the
    simulation of the first measurement and the second measurement of the first."""
    within = [sum(r[bench] <= WITHIN for r in rounds) for bench in BENCHES[1:]]
    again = [sum(r["again"][bench] <= WITHIN for r in rounds) for bench in BENCHES[1:]]
    print(
        f"{title}: allreduce within {100 * WITHIN:.0f} % in {within[0]} of {len(rounds)}, "
        f"bcast in {within[1]}; measured again, the machine against itself: allreduce "
        f"{again[0]}, bcast {again[1]}"
    )


def _round(place, folder, k):
    """One round at ``place`` in ``folder``: its row printed; ``{bench: median |error| of the
    simulation, "again": {bench: median |difference| of the second measurement from the
    first}, "held": whether the machine held its phase}``."""
    folder.mkdir(parents=True, exist_ok=True)
    ranks, hosts = PLACES[place]
    profile = folder / "profile.toml"
    with _cluster(hosts):
        probes = [probe_phase(folder)]
        _run(_launch(ranks, hosts, ["-m", "real.calibrate", "--quick", "--out", str(profile)]))
        probes.append(probe_phase(folder))
        for kind in ("measured", "again"):
            for bench in BENCHES:
                measured = _run(_launch(ranks, hosts, ["-m", "real.osu", bench]))
                (folder / f"{bench}.{kind}.txt").write_text(measured)
            probes.append(probe_phase(folder))
    probes[1:1] = profile_phase(profile)  # the calibration's own, inside it (shared memory)
    medians = {"held": phase_held(probes), "again": {}}
    for bench in BENCHES:
        flags = ["--profile", str(profile), "--ranks", str(2 if bench == "osu_latency" else ranks)]
        simulated = _run([sys.executable, "-m", "sim.osu", bench, *flags])
        (folder / f"{bench}.simulated.txt").write_text(simulated)
        measured, again, simulated = (
            read_table(str(folder / f"{bench}.{kind}.txt"), need_shape=False)
            for kind in ("measured", "again", "simulated")
        )
        medians[bench] = compare(measured, simulated)[1]
        medians["again"][bench] = compare(measured, again)[1]
    errors = " | ".join(f"{100 * medians[b]:.1f} %" for b in BENCHES)
    again = ", ".join(f"{100 * medians['again'][b]:.1f}" for b in BENCHES)
    phase = ", ".join("-" if p is None else f"{p:.0f}" for p in probes)
    phase += {True: "", False: " (moved)", None: " (not known)"}[medians["held"]]
    print(f"| {place} | {k} | {errors} | {again} % | {phase} |")
    return medians


def _launch(ranks, hosts, command):
    """``python COMMAND`` on ``ranks`` ranks: the venv's mpiexec, or on the emulated cluster."""
    if hosts is None:
        return launch_command(ranks, [sys.executable, *command])
    return [sys.executable, "-m", "real.cluster", "run", "-n", str(ranks), "--",
            sys.executable, *command]  # fmt: skip


@contextlib.contextmanager
def _cluster(hosts):
    """An emulated cluster of ``hosts`` 1 Gbit/s hosts up inside (none for shared memory)."""
    if hosts is None:
        yield
        return
    up = [sys.executable, "-m", "real.cluster", "up", "--hosts", str(hosts), "--bandwidth", "1Gbit"]
    _run(up)
    try:
        yield
    finally:
        subprocess.run([sys.executable, "-m", "real.cluster", "down"], capture_output=True,
                       timeout=TIMEOUT_S, check=False)  # fmt: skip


def _run(argv):
    """``argv``'s stdout; SystemExit with its stderr's last line if it fails."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"{' '.join(argv[:6])} ...: exit {done.returncode}: {last}")
    return done.stdout


if __name__ == "__main__":
    sys.exit(main())
