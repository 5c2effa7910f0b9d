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


def _timeline(folder, per_rank):
    """Write ``per_rank`` ({rank: [(name, kind, start s, end s), ...]}) as ``folder``'s
    timeline.json, as both backends write it."""
    from twinsgd.run.runlog import chrome_trace_json

    folder.mkdir()
    (folder / "timeline.json").write_bytes(chrome_trace_json(per_rank, "x", "wall"))


def test_own_code_is_read_piece_by_piece_after_each_kind_of_operation(tmp_path):
    """By hand: rank 0's own code after its Send is 30 + 20 us joined (a step's end split it);
    5 us after its gradient is under what a measured run draws, so left out everywhere; its
    Recv's wait is its own event before the Recv, which the own code still follows, as it
    follows an allgather after its wire bytes are read. Gradients 1 and 3 ms: median 2 ms,
    and 3 ms is 1.5x it (long). A simulated rank's 7 us of compute inside its Send (waiting
    for a core) is apart."""
    import numpy as np

    from twinsgd.analysis import own_code

    us = 1e-6

    def laid(*events):  # (name, kind, us) end to end from 0
        ends = np.cumsum([e[2] for e in events]) * us
        return [(n, k, end - d * us, end) for (n, k, d), end in zip(events, ends, strict=True)]

    rank_0 = laid(
        ("compute", "compute", 1000),
        ("local", "compute", 5),
        ("send to 1", "comm", 95),
        ("local", "compute", 30),
        ("local", "compute", 20),
        ("wait", "wait", 50),
        ("recv from 1", "comm", 100),
        ("local", "compute", 100),
    )
    rank_1 = laid(
        ("compute", "compute", 3000),
        ("send", "compute", 7),
        ("send", "comm", 93),
        ("recv", "comm", 100),
        ("local", "compute", 40),
        ("write wire", "comm", 10),
        ("allgather", "comm", 50),
        ("read wire", "comm", 10),
        ("local", "compute", 60),
    )
    rank_2 = laid(("compute", "compute", 2000), ("send", "comm", 100), ("local", "compute", 80))
    _timeline(tmp_path / "run", {0: rank_0, 1: rank_1, 2: rank_2})
    after, roles, gradients, inside, ranks = own_code.pieces(tmp_path / "run")
    assert ranks == 3 and inside == pytest.approx(7 * us)
    # rank 2 does what rank 0 does but Recv: each rank a role of its own
    assert roles == {"rank 0": (0,), "rank 1": (1,), "rank 2": (2,)}
    assert {k: [round(s / us, 6) for s in v] for k, v in after.items()} == {
        ("send", "rank 0"): [50.0],
        ("recv", "rank 0"): [100.0],
        ("recv", "rank 1"): [40.0],
        ("allgather", "rank 1"): [60.0],  # after its wire bytes read, a part of it
        ("send", "rank 2"): [80.0],
    }
    assert sorted(round(g / us, 6) for g in gradients) == [1000.0, 2000.0, 3000.0]
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in own_code.table([tmp_path / "run"], [2]).splitlines()[2:]
    }
    assert rows["after recv, rank 0: us a step (median piece)"] == ["50.0 (100.0)"]  # 100 / 2
    assert rows["after recv, rank 1: us a step (median piece)"] == ["20.0 (40.0)"]
    assert rows["after send, rank 0: us a step (median piece)"] == ["25.0 (50.0)"]
    assert rows["gradient: median (us)"] == ["2000.0"]
    assert rows["gradients at 1.5x the median or more (%)"] == ["33.3"]  # 3 ms of 1, 2, 3
    assert rows["compute inside operations: us a step"] == ["1.2"]  # 7 us / 3 / 2


def test_ranks_doing_the_same_kinds_of_operations_are_one_role_named_as_a_reader_would():
    """A parameter server's workers are read together, apart from the server."""
    from twinsgd.analysis import own_code

    assert own_code.ranks_text([0]) == "rank 0"
    assert own_code.ranks_text([3, 1, 2]) == "ranks 1-3"
    assert own_code.ranks_text([0, 2, 5, 6, 7]) == "ranks 0, 2, 5-7"


def test_a_parameter_servers_own_code_is_read_apart_from_its_workers(tmp_path, capsys):
    """A simulated synchronous PS of 3 nodes: rank 0 serves (Recv, Send), ranks 1-2 compute."""
    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "ps", "--nodes", "3", "--algorithm", "ps", "--compute", "measured")
    capsys.readouterr()
    assert compare.main([str(tmp_path / "ps"), "--own-code"]) == 0
    out = capsys.readouterr().out
    labels = {row.split("|")[1].strip() for row in out.splitlines() if row.startswith("|")}
    assert "after recv, rank 0: us a step (median piece)" in labels  # the server's update
    assert "after recv, ranks 1-2: us a step (median piece)" in labels  # the workers' next batch


def test_compare_own_code_sets_two_runs_pieces_side_by_side(tmp_path, capsys):
    """Two simulated runs, one at half speed: their gradients (16 samples x 1 ms) are 16 and
    32 ms, the ratio 2.00."""
    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "fast", "--latency", "1us")
    _sim(tmp_path / "slow", "--latency", "1us", "--speeds", "0.5x")
    capsys.readouterr()
    assert compare.main([str(tmp_path / "fast"), str(tmp_path / "slow"), "--own-code"]) == 0
    out = capsys.readouterr().out
    assert "| gradient: median (us) | 16000.0 | 32000.0 | 2.00 |" in out
    assert "| gradients at 1.5x the median or more (%) | 0.0 | 0.0 | - |" in out


def test_compare_own_code_without_a_timeline_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "p.toml").write_text("[compute]\nseconds_per_sample = 1e-3\n")
    _sim(tmp_path / "a")
    (tmp_path / "a" / "timeline.json").unlink()
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        compare.main([str(tmp_path / "a"), "--own-code"])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "timeline.json: not a timeline (FileNotFoundError" in lines[0]
