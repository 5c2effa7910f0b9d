"""The prediction-error table of `analysis.validate`: numbers from run folders, the table, the
summary per network and the targets, apart from running anything (so ``--from`` and the tests
use them alone).

A cell's folder holds ``real-K`` run folders (measured) and ``sim`` (simulated) and a
``row.json`` (the cell, its commands, its status); a row is the cell with `NUMBERS`, and at
the calibration's host count how fast its runs' gradient was against the calibration's
(`gradient_vs_calibration_pct`).
"""

import contextlib
import csv
import json
import statistics
from pathlib import Path

import numpy as np

from twinsgd.analysis import own_code
from twinsgd.analysis.compare import read_run

CALIBRATION_HOSTS = 2  # the profile is measured on this many hosts; other counts extrapolate
# Targets, |error| in %: (median, worst) on an emulated network, the median on shared memory, the
# median over the extrapolated rows of any network.
EMULATED_MEDIAN_PCT, EMULATED_WORST_PCT, SHM_MEDIAN_PCT, EXTRAPOLATED_MEDIAN_PCT = 5, 15, 10, 10
NUMBERS = (
    "measured_ms",
    "spread_pct",
    "sim_ms",
    "error_pct",
    "measured_compute_ms",
    "sim_compute_ms",
    "compute_error_pct",
    "measured_comm_ms",
    "sim_comm_ms",
    "comm_error_pct",
    "measured_wait_ms",
    "sim_wait_ms",
    "wait_diff_ms",
    "measured_p90_ms",
    "sim_p90_ms",
    "p90_error_pct",
)
PARTS = ("time", "compute", "comm", "wait")  # summary.json's PART_s, seconds
CELL_COLUMNS = ("network", "config", "hosts", "extrapolated", "status", "repeats")
# read_cell adds gradient_vs_calibration_pct at the calibration's host count
CSV_COLUMNS = (*CELL_COLUMNS, *NUMBERS, "gradient_vs_calibration_pct", "phase_held")


# -- numbers from run folders --------------------------------------------------------------------


def row_numbers(real_dirs, sim_dir):
    """Prediction and measurement of one cell, per iteration, from its run folders.

    Parameters
    ----------
    real_dirs : list of path
        The repeats of the real run (``real.train`` folders, status done).
    sim_dir : path
        The simulated run (``sim.run`` folder).

    Returns
    -------
    dict
        `NUMBERS`: times per iteration in ms (the measured ones the median over the repeats,
        each of total, compute, comm and wait on its own), ``spread_pct`` = 100 (max - min) /
        median of the repeats' times, errors in % of the measured value (None when that is 0),
        ``wait_diff_ms`` = sim - measured; the 90th percentile of a step's time (`step_p90_ms`,
        the measured one the median over the repeats) and its error; and ``repeats``.

    Raises
    ------
    ValueError
        No repeats, or a folder that is not a finished run (naming it).
    """
    if not real_dirs:
        raise ValueError(f"no real runs beside {sim_dir}")
    reals = [_per_iteration_ms(read_run(d)[0]) for d in real_dirs]
    sim = _per_iteration_ms(read_run(sim_dir)[0])
    numbers = {"repeats": len(reals)}
    for part in PARTS:
        name = "" if part == "time" else f"{part}_"  # measured_ms, measured_compute_ms, ...
        numbers[f"measured_{name}ms"] = statistics.median(r[part] for r in reals)
        numbers[f"sim_{name}ms"] = sim[part]
        if part != "wait":  # wait's measured value may be ~0: its difference instead
            numbers[f"{name}error_pct"] = _percent(
                sim[part] - numbers[f"measured_{name}ms"], numbers[f"measured_{name}ms"]
            )
    times = [r["time"] for r in reals]
    numbers["spread_pct"] = _percent(max(times) - min(times), numbers["measured_ms"])
    numbers["wait_diff_ms"] = numbers["sim_wait_ms"] - numbers["measured_wait_ms"]
    measured_p90 = [step_p90_ms(d) for d in real_dirs]
    numbers["measured_p90_ms"] = (
        statistics.median(measured_p90) if None not in measured_p90 else None
    )
    numbers["sim_p90_ms"] = step_p90_ms(sim_dir)
    numbers["p90_error_pct"] = (
        _percent(numbers["sim_p90_ms"] - numbers["measured_p90_ms"], numbers["measured_p90_ms"])
        if numbers["sim_p90_ms"] is not None and numbers["measured_p90_ms"] is not None
        else None
    )
    return numbers


def step_p90_ms(run_dir, skip=5):
    """The 90th percentile of a step's time, ms, over every rank's steps of a run folder
    (steps.csv: the time between a rank's consecutive step ends, its first ``skip`` steps left
    out as warm-up); None without enough steps. The mean hides what a synchronous collective
    waits for, the slowest rank's step; the spread shows it."""
    ends, path = {}, Path(run_dir) / "steps.csv"
    if not path.is_file():
        return None
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            ends.setdefault(row["rank"], []).append((int(row["iteration"]), float(row["time_s"])))
    steps = []
    for rank_ends in ends.values():
        times = np.array([0.0] + [t for _, t in sorted(rank_ends)])  # the clock starts at 0
        steps.extend(np.diff(times)[skip:])
    return 1e3 * float(np.percentile(steps, 90)) if len(steps) >= 10 else None


def _per_iteration_ms(summary):
    """{part: ms per iteration} of a run's summary.json (per-rank means), for `PARTS`."""
    return {part: 1e3 * summary[f"{part}_s"] / summary["iterations"] for part in PARTS}


def _percent(part, whole):
    return None if not whole else 100 * part / whole


def read_cell(cell_dir):
    """The table's row of one cell folder (``row.json`` and the run folders beside it)."""
    cell_dir = Path(cell_dir)
    meta = json.loads((cell_dir / "row.json").read_text())
    row = {key: meta[key] for key in ("network", "config", "hosts", "status")}
    if row["status"] == "running":
        row["status"] = "failed: interrupted (row.json still says running)"
    if row["status"] == "ok":
        reals = sorted(cell_dir.glob("real-*[0-9]"), key=lambda p: int(p.name.split("-")[-1]))
        reals = [p for p in reals if p.is_dir()]
        try:
            row.update(row_numbers(reals, cell_dir / "sim"))
        except ValueError as err:
            row["status"] = f"failed: {err}"
        if row["hosts"] == CALIBRATION_HOSTS:
            row["gradient_vs_calibration_pct"] = gradient_vs_calibration_pct(reals, cell_dir.parent)
        row["phase_held"] = phase_held(
            _calibration_phase(cell_dir.parent) + meta.get("phase_us", [])
        )
    return row


PHASE_HELD = 1.5  # the machine's phase probes within this ratio of each other: it held


def phase_held(probes):
    """Whether ``probes`` (`real.phase`'s microseconds, None where one could not be taken)
    say this machine held its phase: False where two taken are more than `PHASE_HELD` apart,
    True where all were taken and none are, None where that is not known (none taken, or
    some missing between probes that agree). Why: the machine runs at two speeds, 3x apart in
    what copies through memory (`real.phase`), and a row whose calibration and runs met
    different ones is off by the machine, not by the model.

    >>> phase_held([135.0, 140.2, 131.9]), phase_held([135.0, 395.0]), phase_held([None])
    (True, False, None)
    >>> phase_held([135.0, None, 137.0]), phase_held([135.0, None, 395.0])
    (None, False)
    """
    taken = [p for p in probes if p is not None]
    if taken and max(taken) > PHASE_HELD * min(taken):
        return False
    return True if taken and len(taken) == len(probes) else None


def _calibration_phase(net_dir):
    """The probes around a network's calibration (``phase.json``) and inside it, around its
    measurements of messages (`profile_phase` of its ``profile.toml``); [] where there are
    none."""
    probes = []
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        probes += json.loads((Path(net_dir) / "phase.json").read_text())["calibration"]
    return probes + profile_phase(Path(net_dir) / "profile.toml")


def profile_phase(profile):
    """The machine's phase probes a calibration took inside itself, around its measurements of
    messages (the profile's ``[cluster] phase_us``, us; taken on shared memory: the phase can
    switch inside a calibration, between probes around it that agree); [] where there are
    none or the profile does not read."""
    import tomllib

    with contextlib.suppress(OSError, ValueError, KeyError, TypeError), open(profile, "rb") as f:
        return list(tomllib.load(f)["cluster"]["phase_us"])
    return []


def gradient_vs_calibration_pct(real_dirs, net_dir):
    """How much slower (+) or faster the measured runs' gradient was than the calibration's, %:
    the median over the runs of each one's median gradient (`read_run_gradients`), against the
    median of every gradient of the calibration's windows (``net_dir/profile.steps*-*``, what
    ``--compute empirical`` draws from). Why: this machine's speed moves by 1.5-2x within an
    hour, and a row whose compute error matches this one is off by the machine, not the model
    (the runs at the calibration's host count only: there each rank has a core, as in the
    calibration). None where either has no timeline."""
    from twinsgd.calibration.steptimes import read_run_gradients

    calibration = [read_run_gradients(p) for p in sorted(Path(net_dir).glob("profile.steps*-*"))]
    calibration = [g for g in calibration if g is not None]
    runs = [g for g in map(read_run_gradients, real_dirs) if g is not None]
    if not calibration or not runs:
        return None
    measured = statistics.median(float(np.median(g)) for g in runs)
    return 100 * (measured / float(np.median(np.concatenate(calibration))) - 1)


def read_rows(folder, order=None):
    """The rows of every cell under ``folder`` (``NET/CONFIG-H/row.json``), sorted by ``order``
    (a key function; unsorted without one)."""
    cells = [read_cell(p.parent) for p in Path(folder).glob("*/*/row.json")]
    return sorted(cells, key=order) if order else cells


# -- the table and the summary -------------------------------------------------------------------

COLUMNS = (  # (header, row key, format)
    ("measured (ms/it)", "measured_ms", "{:.3f}"),
    ("spread (%)", "spread_pct", "{:.1f}"),
    ("simulated (ms/it)", "sim_ms", "{:.3f}"),
    ("error (%)", "error_pct", "{:+.1f}"),
    ("compute error (%)", "compute_error_pct", "{:+.1f}"),
    ("comm error (%)", "comm_error_pct", "{:+.1f}"),
    ("wait sim - measured (ms/it)", "wait_diff_ms", "{:+.3f}"),
    ("p90 step measured (ms)", "measured_p90_ms", "{:.3f}"),
    ("p90 error (%)", "p90_error_pct", "{:+.1f}"),
    ("gradient vs calibration (%)", "gradient_vs_calibration_pct", "{:+.1f}"),
    ("machine's phase", "phase_held", "{}"),
)


def table(rows):
    """The Markdown table of ``rows`` (dicts of `read_cell`), one line per row."""
    head = ["network", "config", "hosts", *(c[0] for c in COLUMNS), "note"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in rows:
        cells = [row["network"], row["config"], str(row["hosts"])]
        cells += ["-" if row.get(key) is None else _cell(row[key], fmt) for _, key, fmt in COLUMNS]
        cells.append("" if row["status"] == "ok" else row["status"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value, fmt):
    """A table cell: a number as ``fmt`` says, the machine's phase as "held" or "moved"."""
    if isinstance(value, bool):
        return "held" if value else "moved"
    return fmt.format(value)


def summary(rows):
    """Per network, the median and worst |error| over the calibrated and the extrapolated rows;
    where the extrapolated rows are of several host counts, each count's too (an aim such as
    "within 15 % at 4, 8 and 16" is one count at a time, and the pooled median hides a count
    that misses it: 15.4, 22.7 and 13.9 % pooled to 18.4 % on 16 cores, 2026-12-04).

    Examples
    --------
    >>> rows = [{"network": "shm", "config": c, "hosts": h, "status": "ok", "error_pct": e,
    ...          "spread_pct": 1.0} for c, h, e in [("a", 2, 4.0), ("b", 2, -9.0), ("a", 4, 20.0)]]
    >>> print("\\n".join(summary(rows)))
    shm, 2 hosts (calibrated): median |error| 6.5 %, worst 9.0 % (b), 2 of 2 rows; median spread 1.0 %
    shm, 4 hosts (extrapolated from 2): median |error| 20.0 %, worst 20.0 % (a), 1 of 1 rows; median spread 1.0 %
    >>> rows += [{"network": "shm", "config": "a", "hosts": 8, "status": "ok", "error_pct": -4.0,
    ...           "spread_pct": 3.0}]
    >>> print("\\n".join(summary(rows)[1:]))
    shm, 4, 8 hosts (extrapolated from 2): median |error| 12.0 %, worst 20.0 % (a), 2 of 2 rows; median spread 2.0 %
    shm, 4 hosts: median |error| 20.0 %, worst 20.0 % (a), 1 of 1 rows; median spread 1.0 %
    shm, 8 hosts: median |error| 4.0 %, worst 4.0 % (a), 1 of 1 rows; median spread 3.0 %
    """  # noqa: E501
    lines = []
    for net in networks_of(rows):
        for label, group in _groups(rows, net):
            if not group:
                continue
            lines.append(_summary_line(f"{net}, {label}", group))
            held = [r for r in group if r.get("phase_held")]
            if any(r.get("phase_held") is False for r in group):
                lines.append(_summary_line(f"{net}, {label}, rows that held the phase", held))
            counts = sorted({r["hosts"] for r in group})
            if len(counts) > 1:
                lines += [
                    _summary_line(f"{net}, {h} hosts", [r for r in group if r["hosts"] == h])
                    for h in counts
                ]
    return lines


def _summary_line(title, group):
    """``title``: the median and worst |error| of ``group``'s measured rows, their count, the
    median spread and the p90 step's median |error|."""
    done = _measured(group)
    if not done:
        return f"{title}: no rows measured (of {len(group)})"
    worst = max(done, key=lambda r: abs(r["error_pct"]))
    p90 = [abs(r["p90_error_pct"]) for r in done if r.get("p90_error_pct") is not None]
    return (
        f"{title}: median |error| {_median_error(done):.1f} %, worst "
        f"{abs(worst['error_pct']):.1f} % ({worst['config']}), {len(done)} of "
        f"{len(group)} rows; median spread {_median_spread(done):.1f} %"
        + (f"; p90 step median |error| {statistics.median(p90):.1f} %" if p90 else "")
    )


def targets(rows):
    """One line per target, each "met", "missed" or "not measured" (no exit status rides on it).

    Targets on |error| of the time per iteration: an emulated network's calibrated rows, median
    <= max(5 %, their median spread) and worst <= 15 %; shared memory's, median <= 10 %; any
    network's extrapolated rows (2 -> 4 hosts), median <= 10 %.
    """
    lines = []
    for net in networks_of(rows):
        (_, calibrated), (label, extrapolated) = _groups(rows, net)
        done = _measured(calibrated)
        median = _median_error(done) if done else None
        if net == "shm":
            lines.append(
                _target(f"{net}: median |error| <= {SHM_MEDIAN_PCT} %", SHM_MEDIAN_PCT, median)
            )
        else:
            spread = _median_spread(done) if done else 0.0
            limit = max(EMULATED_MEDIAN_PCT, spread)
            lines.append(
                _target(
                    f"{net}: median |error| <= max({EMULATED_MEDIAN_PCT} %, median "
                    f"spread {spread:.1f} %) = {limit:.1f} %",
                    limit,
                    median,
                )
            )
            worst = max(abs(r["error_pct"]) for r in done) if done else None
            lines.append(
                _target(
                    f"{net}: worst |error| <= {EMULATED_WORST_PCT} %", EMULATED_WORST_PCT, worst
                )
            )
        if extrapolated:
            far = _measured(extrapolated)
            lines.append(
                _target(
                    f"{net}: extrapolation {CALIBRATION_HOSTS} -> "
                    f"{label.split(' hosts')[0]} hosts, median |error| <= "
                    f"{EXTRAPOLATED_MEDIAN_PCT} %",
                    EXTRAPOLATED_MEDIAN_PCT,
                    _median_error(far) if far else None,
                )
            )
    return lines


def _target(text, limit, value):
    if value is None:
        return f"{text}: not measured"
    shown = f"{value:.1f}" if round(value, 1) != limit or value == limit else f"{value:.2f}"
    return f"{text}: {'met' if value <= limit else 'missed'} ({shown} %)"


def _measured(rows):
    """The rows that have an error to count."""
    return [r for r in rows if r["status"] == "ok" and r.get("error_pct") is not None]


def networks_of(rows):
    """The networks of ``rows``, in their order."""
    return list(dict.fromkeys(r["network"] for r in rows))


def _groups(rows, net):
    """[("2 hosts (calibrated)", rows), ("4 hosts (extrapolated from 2)", rows)] of a network."""
    mine = [r for r in rows if r["network"] == net]
    far = [r for r in mine if r["hosts"] != CALIBRATION_HOSTS]
    counts = ", ".join(str(h) for h in sorted({r["hosts"] for r in far}))
    near = [r for r in mine if r["hosts"] == CALIBRATION_HOSTS]
    return [
        (f"{CALIBRATION_HOSTS} hosts (calibrated)", near),
        (f"{counts or 'other'} hosts (extrapolated from {CALIBRATION_HOSTS})", far),
    ]


def _median_error(rows):
    return statistics.median(abs(r["error_pct"]) for r in rows)


def _median_spread(rows):
    return statistics.median(r["spread_pct"] or 0.0 for r in rows)


def machine_speed(folder):
    """Per network folder of ``folder``, one line: the median gradient (ms) of each window of
    the calibration's real program (``profile.steps*-MODEL``, `real.calibrate`) and the range
    of the medians of the measured runs at the calibration's host count (one core a rank, as
    there). Why: the machine's own speed changes from second to second on some hosts (1.2-1.5x
    here), and a row off by as much as calibration and runs differ is the machine's, not the
    model's. Empty where no network has both."""
    from twinsgd.calibration.steptimes import read_run_gradients

    def median_ms(run_dir):
        seconds = read_run_gradients(run_dir)
        return None if seconds is None else 1e3 * float(np.median(seconds))

    lines = []
    for net_dir in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        windows = sorted(  # steps1, steps2, then steps (the last window)
            net_dir.glob("profile.steps*-*"), key=lambda p: (".steps-" in p.name, p.name)
        )
        calibration = [m for m in map(median_ms, windows) if m is not None]
        runs = net_dir.glob(f"*-{CALIBRATION_HOSTS}/real-*[0-9]")
        measured = [m for m in map(median_ms, runs) if m is not None]
        if calibration and measured:
            lines.append(
                f"{net_dir.name}: the calibration's windows "
                + ", ".join(f"{m:.2f}" for m in calibration)
                + f"; the {len(measured)} runs at {CALIBRATION_HOSTS} hosts "
                f"{min(measured):.2f}-{max(measured):.2f}"
            )
    return lines


def render(rows, speed=()):
    """What is printed and written to validation.md: the table, the summary, the targets, and
    the machine's speed (`machine_speed`'s lines) where given."""
    errors = "\n".join(f"- {line}" for line in summary(rows)) or "- no rows"
    goals = "\n".join(f"- {line}" for line in targets(rows)) or "- no rows"
    machine = "".join(f"- {line}\n" for line in speed)
    return (
        f"{table(rows)}\n\nTime per iteration, |error| per network:\n{errors}\n\n"
        f"Targets:\n{goals}\n"
        + (f"\nThe machine's speed, a gradient's median (ms):\n{machine}" if machine else "")
    )


def write_outputs(rows, folder):
    """Write ``folder/validation.md`` (`render`, with `machine_speed`),
    ``folder/validation.csv`` (`CSV_COLUMNS`, floats in full precision, empty where there is
    no number) and ``folder/own-code.md`` (each cell's own code by role, measured and
    simulated: `own_code.cells_text`); returns the rendered text."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = render(rows, machine_speed(folder))
    (folder / "validation.md").write_text(text)
    (folder / "own-code.md").write_text(own_code.cells_text(folder))
    with open(folder / "validation.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "extrapolated": row["hosts"] != CALIBRATION_HOSTS})
    return text
