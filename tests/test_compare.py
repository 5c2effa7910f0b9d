"""twinsgd.analysis.compare: run folders side by side, with ratios and the weights' verdict."""

import pytest

from sim import run
from twinsgd.analysis import compare


def _sim(folder, *argv):
    assert (
        run.main(
            [
                "--nodes",
                "2",
                "--algorithm",
                "allreduce",
                "--dataset",
                "synthetic",
                "--iterations",
                "4",
                "--batch-size",
                "16",
                "--compute",
                "profile",
                "--profile",
                str(folder.parent / "p.toml"),
                *argv,
                "--out",
                str(folder),
            ]
        )
        == 0
    )


def test_the_table_shows_both_runs_their_ratio_and_equal_weights(tmp_path, capsys):
    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "fast", "--latency", "1us")
    _sim(tmp_path / "slow", "--latency", "1us", "--speeds", "0.5x")
    capsys.readouterr()
    assert compare.main([str(tmp_path / "fast"), str(tmp_path / "slow")]) == 0
    lines = {
        row.split("|")[1].strip(): [c.strip() for c in row.split("|")[2:-1]]
        for row in capsys.readouterr().out.splitlines()[2:]
    }
    assert lines["compute (ms)"] == ["16.000", "32.000", "2.00"]  # 16 samples x 1 ms, halved
    assert lines["iterations"] == ["4", "4", "1.00"]
    assert lines["final weights"][0] == "bit for bit"  # speed changes time, not arithmetic
    _sim(tmp_path / "other", "--seed", "7")
    assert compare.same_weights(tmp_path / "fast", tmp_path / "other").startswith("differ by")


def test_runs_of_different_models_compare_and_say_their_weights_differ_in_shape(tmp_path, capsys):
    """An MNIST MLP beside a CIFAR-sized one: every row but the weights is comparable."""
    import numpy as np

    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "mnist")
    _sim(tmp_path / "cifar")
    with np.load(tmp_path / "cifar" / "model.npz") as weights:
        arrays = {k: weights[k] for k in weights.files}
    arrays["dense1.W"] = np.zeros((3072, 200), np.float32)  # a CIFAR input layer
    np.savez(tmp_path / "cifar" / "model.npz", **arrays)
    capsys.readouterr()
    assert compare.main([str(tmp_path / "mnist"), str(tmp_path / "cifar")]) == 0
    out = capsys.readouterr().out
    assert "| final weights | different shapes |" in out and "| iterations | 4 | 4 |" in out


def test_a_folder_that_is_not_a_finished_run_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        compare.main([str(tmp_path)])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "not a run folder" in lines[0]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            ("summary.json", "[]"),
            "summary.json: not a run folder's (a JSON object expected, got list)",
        ),
        (
            ("summary.json", '{"status": "done"}'),
            "summary.json: nodes must be a number, got 'missing'",
        ),
        (("summary.json", ""), "not a run folder (JSONDecodeError"),
        (("model.npz", b"PK\x03\x04truncated"), "does not read as weights (BadZipFile"),
        (("model.npz", b""), "does not read as weights"),
    ],
)
def test_a_damaged_run_folder_is_one_line_and_exit_2(tmp_path, capsys, damage, message):
    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "good")
    _sim(tmp_path / "bad")
    name, content = damage
    path = tmp_path / "bad" / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    before = {p.name: p.read_bytes() for p in (tmp_path / "bad").iterdir()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        compare.main([str(tmp_path / "good"), str(tmp_path / "bad")])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert {p.name: p.read_bytes() for p in (tmp_path / "bad").iterdir()} == before  # untouched


def test_a_full_disk_under_the_table_is_one_line_and_exit_1(tmp_path):
    import subprocess
    import sys

    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "a")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "twinsgd.analysis.compare", str(tmp_path / "a")],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr == (
        "python -m twinsgd.analysis.compare: cannot write the table: No space left on device\n"
    )


def test_runs_on_different_profiles_say_so_and_the_profile_is_in_each_run_folder(tmp_path, capsys):
    """Each simulated run keeps the profile it ran on (a copy, and its hash in config.json);
    the table says when two runs' profiles differ, and says nothing when they do not."""
    import hashlib
    import json

    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "a")
    _sim(tmp_path / "b")
    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 2e-3\n")
    _sim(tmp_path / "c")
    for name, per_sample in (("a", "1e-3"), ("c", "2e-3")):
        copy = (tmp_path / name / "profile.toml").read_bytes()
        assert copy == f"[compute]\nseconds_per_sample = {per_sample}\n".encode()
        config = json.loads((tmp_path / name / "config.json").read_text())
        assert config["cluster"]["profile_sha256"] == hashlib.sha256(copy).hexdigest()
    capsys.readouterr()
    compare.main([str(tmp_path / "a"), str(tmp_path / "b")])
    assert "differs" not in capsys.readouterr().out
    measured = json.loads((tmp_path / "a" / "config.json").read_text())
    measured["cluster"], measured["mpi"] = None, "MPICH Version: 5.0.2"  # as real.train's
    simulated = json.loads((tmp_path / "b" / "config.json").read_text())
    assert compare.provenance_rows([measured, simulated]) == []
    compare.main([str(tmp_path / "a"), str(tmp_path / "c")])
    (row,) = [r for r in capsys.readouterr().out.splitlines() if "differs" in r]
    digest = [hashlib.sha256((tmp_path / "a" / "profile.toml").read_bytes()).hexdigest()[:12]]
    digest += [hashlib.sha256((tmp_path / "c" / "profile.toml").read_bytes()).hexdigest()[:12]]
    assert row == f"| profile sha256 (differs) | {digest[0]} | {digest[1]} | - |"


def test_config_json_names_the_commit_the_code_ran_from(tmp_path):
    import json
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "a")
    commit = json.loads((tmp_path / "a" / "config.json").read_text())["versions"]["twinsgd_commit"]
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert commit in (head, f"{head}+dirty")
