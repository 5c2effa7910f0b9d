"""Run-folder files are valid at every instant: atomic documents, logs grown by whole lines."""

import csv
import json
import os
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twinsgd.run.runfolder import (
    FLUSH_ROWS,
    STEPS_COLUMNS,
    CsvLog,
    RunFolder,
    _lines,
    claim_run_folder,
    rounded,
)
from twinsgd.run.runlog import RunLog


def test_json_is_strict_and_numpy_scalars_become_plain(tmp_path):
    run = RunFolder(tmp_path / "a" / "b")
    run.write_json("s.json", {"x": np.float32(1.5), "n": np.int64(3), "bad": float("nan")})
    assert json.loads((run.path / "s.json").read_text()) == {"x": 1.5, "n": 3, "bad": None}
    assert not list(run.path.glob(".*tmp"))  # no temporary file left behind


def test_logs_round_trip_floats_exactly(tmp_path):
    run = RunFolder(tmp_path)
    log = run.log("m.csv", ("a", "b", "c"))
    values = [0.1 + 0.2, 1e-300, 123456789.123456789]
    log.write_rows([{"a": v, "b": i} for i, v in enumerate(values)])
    log.close()
    with (run.path / "m.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["a"]) for r in rows] == values
    assert [r["c"] for r in rows] == ["", "", ""]


_FIELD = st.one_of(
    st.floats(),  # NaN, infinities, -0.0 and 0.0 side by side
    st.sampled_from([0.0, -0.0, 0.1, 5.051200000000001e-06]),  # values that repeat
    st.integers(),
    st.none(),
    st.floats(width=32).map(np.float32),
    st.text(alphabet="abnoNe", max_size=5),
    st.booleans(),
    st.integers(2**63 - 2, 2**64),  # past orjson's ints
    st.floats().map(np.float64),
)
# what steps.csv holds, which orjson writes (`runfolder._python_floats`): floats of every form
# (1e-05 <= |x| < 1e-04 and one-digit exponents are where its forms differ from str's), ints
_NUMBER = st.one_of(
    st.floats(allow_infinity=False),
    st.floats(1e-6, 1e-3).map(lambda x: float(f"{x:.3g}")),
    st.floats(1e-10, 1e-3),
    st.sampled_from([0.0, -0.0, 1e-05, -1e-05, 9.99e-05, 1e-04, 1e16, 1e-10]),
    st.integers(-(2**63), 2**63 - 1),
    st.none(),
)


@settings(max_examples=500)
@given(st.integers(1, 6).flatmap(lambda w: st.lists(st.lists(_FIELD, min_size=w, max_size=w))))
def test_lines_are_each_fields_str_a_column_at_a_time(rows):
    """The column-wise formatter writes what ``"%s,%s" % row`` wrote, row by row: each field
    ``str`` of its value (a float's shortest repr, a negative zero's sign kept), whatever the
    column mixes; a whole field that reads None or nan empty."""
    assert _lines(rows) == _str_lines(rows)


@settings(max_examples=500)
@given(st.integers(1, 11).flatmap(lambda w: st.lists(st.lists(_NUMBER, min_size=w, max_size=w))))
def test_rows_of_numbers_are_written_as_str_writes_them(rows):
    """Rows of floats, ints and None (orjson's path): each field ``str`` of its value, the
    fields of None or NaN empty; an infinity in any row sends them all to ``str``."""
    assert _lines(rows) == _str_lines(rows)
    if rows:
        rows[-1][-1] = float("-inf")
        assert _lines(rows) == _str_lines(rows)


def test_rows_of_other_lengths_are_refused_as_the_columns_refuse_them():
    """Rows of numbers all of one length, as the column-wise formatter requires: a short or a
    long row is a ValueError, not a line of another width."""
    for rows in ([[1, 2.5], [3]], [[1.5], [2, 3]], [[1, 2], [3, 4], [5, 6, 7]]):
        with pytest.raises(ValueError):
            _lines(rows)


def _str_lines(rows):
    """What ``"%s,%s" % row`` wrote, row by row, with the fields None or nan empty."""
    fields = [[str(v) for v in row] for row in rows]
    return "".join(",".join("" if f in ("None", "nan") else f for f in r) + "\n" for r in fields)


def test_a_run_logs_step_row_lands_under_its_columns(tmp_path):
    """RunLog writes a step's values in steps.csv's column order without a dict: each value
    read back under its own header, the totals summed."""
    log = RunLog(RunFolder(tmp_path), {"config": {}})
    log.charge("compute", 0.25)
    log.charge_collective(0.125, 0.5, 96, 64)
    log.end_step(rank=3, epoch=2, iteration=7, time_s=1.5, loss=np.float32(0.75), staleness=4)
    log.steps.close()
    with (tmp_path / "steps.csv").open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert tuple(row) == STEPS_COLUMNS
    assert row == {
        "rank": "3",
        "epoch": "2",
        "iteration": "7",
        "time_s": "1.5",
        "compute_s": "0.25",
        "comm_s": "0.5",
        "wait_s": "0.125",
        "bytes_sent": "96",
        "bytes_recv": "64",
        "staleness": "4",
        "loss": "0.75",
    }
    assert log.totals == {
        "compute_s": 0.25,
        "comm_s": 0.5,
        "wait_s": 0.125,
        "bytes_sent": 96,
        "bytes_recv": 64,
    }


def test_arrays_saved_by_name(tmp_path):
    run = RunFolder(tmp_path)
    run.save_arrays("model.npz", {"dense1.W": np.eye(3, dtype=np.float32)})
    with np.load(run.path / "model.npz") as npz:
        np.testing.assert_array_equal(npz["dense1.W"], np.eye(3))


class _Unsavable:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("disk full")


def test_a_failed_replace_keeps_the_old_file(tmp_path):
    run = RunFolder(tmp_path)
    run.save_arrays("model.npz", {"w": np.arange(3.0)})
    with pytest.raises(RuntimeError, match="disk full"):
        run.save_arrays("model.npz", {"w": np.zeros(2), "v": _Unsavable()})
    with np.load(run.path / "model.npz") as npz:
        np.testing.assert_array_equal(npz["w"], np.arange(3.0))
    assert not list(run.path.glob(".*tmp"))


def test_bytes_given_in_pieces_are_written_one_after_another_atomically_or_in_place(
    tmp_path, monkeypatch
):
    """timeline.json comes as a list of pieces (`runlog.chrome_trace_pieces`): written whole,
    through a temporary file and a rename; on a full disk, rewritten where the old one lies."""
    import errno

    run = RunFolder(tmp_path / "run")
    run.write_bytes("timeline.json", [b'{"a": ', b"[1, 2]", b"}\n"])
    assert (run.path / "timeline.json").read_bytes() == b'{"a": [1, 2]}\n'
    assert not list(run.path.glob(".*tmp"))

    def full(name, write):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run, "_replace", full)
    run.write_bytes("timeline.json", [b"{", b"}\n"])
    assert (run.path / "timeline.json").read_bytes() == b"{}\n"


def test_runs_claimed_in_the_same_second_get_their_own_folders(tmp_path):
    names = [claim_run_folder(None, "allreduce-mnist", runs=tmp_path).name for _ in range(3)]
    assert len(set(names)) == 3
    assert names[1] == names[0] + "-2" or names[1][:15] != names[0][:15]  # or a new second


def test_claiming_a_folder_with_a_run_needs_overwrite(tmp_path):
    run = RunFolder(tmp_path / "run")
    run.write_json("config.json", {"status": "done"})
    run.write_json("timeline.json", {})
    (run.path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds a run \(status 'done'\); give --overwrite"):
        claim_run_folder(run.path, "x")
    claim_run_folder(run.path, "x", overwrite=True)
    assert sorted(p.name for p in run.path.iterdir()) == ["notes.txt"]  # the old run, gone


@pytest.mark.parametrize("out", ["", "  "])
def test_an_empty_out_is_no_folder(out):
    with pytest.raises(ValueError, match="--out must name a folder"):
        claim_run_folder(out, "x")


def test_a_file_is_no_run_folder(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        claim_run_folder(tmp_path / "f", "x")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root)")
def test_a_full_disk_fails_the_log_loudly_naming_the_file(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(disk)], check=True)
    log = None
    try:
        log = CsvLog(disk / "steps.csv", ("a", "b"))
        with pytest.raises(OSError, match=r"steps\.csv: \d+ bytes not written"):
            for _ in range(10_000):
                log.write_rows([{"a": 1.25, "b": "x" * 50}] * 10)
        os.close(log._fd)
        log._fd = None
        lines = (disk / "steps.csv").read_text().split("\n")
        assert lines[-1] == "" and all(line.count(",") == 1 for line in lines[:-1])
    finally:
        if log is not None and log._fd is not None:  # a failed check left it open: umount
            os.close(log._fd)
        subprocess.run(["umount", str(disk)], check=True)


def test_overwriting_a_run_folder_leaves_none_of_the_earlier_runs_markers(tmp_path):
    """An earlier run's .interrupted would tell the next run's first interrupted rank that
    someone else had already marked the run; its .heartbeat would speak for a dead run."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("config.json", "summary.json", ".interrupted", ".heartbeat"):
        (run / name).write_text("{}")
    claim_run_folder(run, "x", overwrite=True)
    assert sorted(p.name for p in run.iterdir()) == []


def _near_half(k, ndigits, ulps):
    """(k + 1/2) / 10**ndigits moved ``ulps`` units in the last place: where the product's
    rounding could carry numpy's rint across the half that Python's round sees."""
    x = (k + 0.5) / 10**ndigits
    return float(x + ulps * np.spacing(x))


_NEAR_HALF = st.builds(
    _near_half, st.integers(-(10**12), 10**12), st.sampled_from([0, 1, 3, 6]), st.integers(-4, 4)
)


@settings(max_examples=500)
@given(
    st.lists(st.one_of(_NEAR_HALF, st.floats(allow_nan=False), st.floats(-1e4, 1e4)), max_size=30),
    st.sampled_from([0, 1, 3, 6]),
)
def test_rounded_is_pythons_round_of_each(values, ndigits):
    """`rounded` (numpy's rint, Python's round near a half) gives ``round(x, ndigits)`` of
    every value, the sign of a zero included."""
    got = rounded(np.array(values, dtype=np.float64), ndigits)
    assert [repr(x) for x in got] == [repr(round(x, ndigits)) for x in values]


def test_rows_written_one_at_a_time_reach_the_file_every_flush_rows(tmp_path):
    """`CsvLog.write_values` holds rows back for ``flush_s`` (here an hour) but never more than
    `FLUSH_ROWS` of them: the last row of each batch of that many lands it on disk."""
    log = CsvLog(tmp_path / "steps.csv", ("a", "b"), flush_s=3600.0)

    def lines():
        return (tmp_path / "steps.csv").read_text().splitlines()

    for i in range(FLUSH_ROWS - 1):
        log.write_values((i, 0.5))
    assert lines() == ["a,b"]
    log.write_values((FLUSH_ROWS - 1, 0.5))
    assert len(lines()) == 1 + FLUSH_ROWS and lines()[-1] == f"{FLUSH_ROWS - 1},0.5"
    log.write_values((FLUSH_ROWS, 0.25))
    assert len(lines()) == 1 + FLUSH_ROWS
    log.close()
    assert lines()[-1] == f"{FLUSH_ROWS},0.25"
