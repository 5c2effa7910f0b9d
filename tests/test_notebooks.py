"""The notebooks of notebooks/ run at smoke size (TWINSGD_SMOKE=1) and their tables say what the
runs computed: the twin's accuracies agree, the simulator meets the formulas."""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = os.environ.get("TWINSGD_DATA")


def run_notebook(name, figures, timeout_s=600):
    """Run notebook ``name`` at smoke size; its stdout. It must draw each of ``figures`` (file
    names) into $TWINSGD_FIGURES, a fresh folder, and nothing else. The notebook's own work
    folders (``tempfile.mkdtemp``) go under a TMPDIR of the test's, removed afterwards."""
    scratch = Path(tempfile.mkdtemp(prefix="twinsgd-notebook-"))
    drawn = scratch / "figures"
    drawn.mkdir()
    env = {
        **os.environ,
        "TWINSGD_SMOKE": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONPATH": str(ROOT),
        "TWINSGD_FIGURES": str(drawn),
        "TMPDIR": str(scratch),
        "PYTHONUNBUFFERED": "1",  # a notebook that runs out of time shows how far it came
    }
    cluster_before = not CAN_EMULATE or cluster_is_up()
    notebook = subprocess.Popen(
        [sys.executable, str(ROOT / "notebooks" / name)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its group: on a timeout, its launches go with it
    )
    try:
        try:
            stdout, stderr = notebook.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(notebook.pid, signal.SIGKILL)
            stdout, stderr = notebook.communicate()
            pytest.fail(f"{name} ran past {timeout_s} s; its last output:\n{stdout[-2000:]}")
        assert notebook.returncode == 0, stderr[-2000:]
        assert "| the study's claim | measured | simulated | reproduced | why |" in stdout
        assert sorted(p.name for p in drawn.iterdir()) == sorted(figures)
        assert all(is_png_figure(drawn / f) for f in figures)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not cluster_before:
            take_down_a_left_cluster(name)
    return stdout


def cluster_is_up():
    """True if an emulated cluster (`real.cluster`) is up on this machine."""
    done = subprocess.run(
        [sys.executable, "-m", "real.cluster", "status"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return not done.stdout.startswith("no cluster is up") or "namespaces exist" in done.stdout


def take_down_a_left_cluster(name, grace_s=60):
    """A notebook's cluster goes down when the notebook ends, however it ends (its holder sees
    its stdin close). Should one still be up ``grace_s`` later, take it down, so the tests
    after this one start clean, and fail this one: the notebook left it."""
    deadline = time.monotonic() + grace_s
    while cluster_is_up():
        if time.monotonic() > deadline:
            subprocess.run(
                [sys.executable, "-m", "real.cluster", "down"], cwd=ROOT, timeout=120, check=True
            )
            pytest.fail(f"{name} left its emulated cluster up for {grace_s} s after it ended")
        time.sleep(1)


def is_png_figure(path):
    """True if ``path`` is a PNG file of some size (a figure, not an empty canvas)."""
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def table_rows(text, first_cell):
    """The cells of the Markdown rows whose first cell matches ``first_cell`` (a regex)."""
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|")
    ]
    return [r for r in rows if re.fullmatch(first_cell, r[0])]


CAN_EMULATE = os.geteuid() == 0 and shutil.which("ip") is not None  # real.cluster's needs
RATES = ("1Gbit",)  # notebook 3's emulated networks at smoke size
needs_mnist = pytest.mark.skipif(
    not DATA or not Path(DATA, "mnist").is_dir(), reason="the real MNIST (TWINSGD_DATA) is needed"
)
# notebooks 2 and 3 train on CIFAR-10, or on the substitute made from Fashion-MNIST
needs_cifar_format = pytest.mark.skipif(
    not DATA or not any(Path(DATA, d).is_dir() for d in ("cifar10", "fashion-mnist")),
    reason="CIFAR-10 or Fashion-MNIST (TWINSGD_DATA) is needed",
)


@needs_mnist
def test_parameter_server_study_twin_agrees_at_every_process_count():
    out = run_notebook("01_parameter_server_mnist.py", ["01_predicted.png", "01_breakdown.png"])
    rows = table_rows(out, r"[1235]")
    assert [r[0] for r in rows] == ["1", "2", "3", "5"]
    for r in rows:  # a synchronous run ends with the same weights measured and simulated
        assert r[5] == r[6], r
    assert rows[0][3] == "1.00"  # the serial run is the speed-up's unit


@needs_cifar_format
def test_sync_async_study_sync_runs_agree():
    out = run_notebook("02_sync_vs_async_ps.py", ["02_accuracy.png", "02_predicted.png"])
    measured = out.split("| workers | mode | gradients to target (measured)")[1]
    sync = [r for r in table_rows(measured, r"[12]") if r[1] == "sync"]
    assert sync
    for r in sync:  # the same weights measured and simulated
        assert r[2] == r[3] and r[6] == r[7], r  # gradients to target and final accuracy
    resnet = out.split("ResNet-18 ghost")[1].split("| workers | mode | gradients")[0]
    speedups = {(r[0], r[1]): float(r[3]) for r in table_rows(resnet, r"[124]")}
    assert speedups["1", "sync"] == 1.0 and 1.0 < speedups["2", "sync"] <= 2.0


def test_straggler_study_meets_the_formulas():
    emulated = CAN_EMULATE
    out = run_notebook(
        "04_stragglers.py", ["04_breakdown.png"] + ["04_timeline_half_core.png"] * emulated
    )
    claims = {r[0]: r for r in table_rows(out, r".+") if len(r) == 5}
    comm = claims["communication costs bytes / bandwidth + latency per message"]
    slowest = next(v for k, v in claims.items() if k.startswith("a synchronous step"))
    assert comm[3] == "yes" and slowest[3] == "yes"
    for r in table_rows(out, r"\d+"):
        if len(r) == 9:
            assert abs(float(r[6])) < 1e-9  # T(p) given the simulator's own straggler draws


@needs_cifar_format
def test_lomonosov_study_local_sgd_exchanges_less():
    emulated = CAN_EMULATE
    per_rate = [f"03_{kind}_{rate}.png" for kind in ("breakdown", "predicted") for rate in RATES]
    out = run_notebook(
        "03_lomonosov2_ten_configurations.py",
        ["03_breakdown_simulated.png"] + per_rate * emulated,
        timeout_s=1200,
    )
    row = table_rows(out, r"Local-SGD\(4\) speeds communication")[0]
    measured, simulated = (
        [] if cell == "not measured" else [float(x.rstrip("x")) for x in cell.split("–")]
        for cell in (row[1], row[2])
    )
    # exchanging every 4th step: at most 4x less communication, and clearly less simulated; a
    # measured ratio is of wall times on a shared machine over 32 steps and moves from run to
    # run (a fresh clone's test run measured 1.2x, 2026-12-05; the same test minutes later
    # over 1.5x): only "less" holds for it
    assert all(1.5 < x <= 4.0 for x in simulated), row
    assert all(x > 1.0 for x in measured), row


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("*.py")), ids=lambda p: p.name)
def test_each_notebook_opens_as_a_notebook_with_a_verdict(path):
    jupytext = pytest.importorskip("jupytext")
    cells = jupytext.read(path).cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert any(c.cell_type == "code" and "verdict_table(" in c.source for c in cells)
