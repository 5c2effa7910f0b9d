"""Run-folder files are valid at every instant: atomic documents, logs grown by whole lines."""

import csv
import json

import numpy as np
import pytest

from algorithms.runfolder import RunFolder


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
