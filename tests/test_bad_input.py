"""Bad input, tried as a new user would: a corpus of malformed flags, files, TOML, profiles,
topology and network files and run folders, and hypothesis over every parser.

Every case must end with one line on stderr naming the flag or file at fault, exit status 2, no
traceback, no run folder left behind, and nothing already on disk changed. ``{tmp}`` in a case is
the test's folder, where `FILES` are written first.
"""

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import run, sweep
from sim.run import parse_stragglers
from twinsgd.analysis import compare
from twinsgd.cli import CheckingParser
from twinsgd.run import units
from twinsgd.run.faults import parse_fail_spec, parse_faults

ROOT = Path(__file__).resolve().parents[1]
BASE = ["--dataset", "mnist-subset", "--iterations", "2", "--no-progress"]

FILES = {  # name -> content (str or bytes)
    "binary.toml": bytes(range(256)),
    "broken.toml": "[network\nlatency = 5\n",
    "unknown.toml": 'colour = "blue"\n',
    "lr-string.toml": 'lr = "fast"\n',
    "nodes-string.toml": 'nodes = "many"\n',
    "nodes-bool.toml": "nodes = true\n",
    "negative.toml": "[compute]\nseconds_per_sample = -1\n",
    "nan.toml": "[compute]\nseconds_per_sample = nan\n",
    "slow-latency.toml": '[network]\nlatency = "fast"\n',
    "no-cores.toml": "[cluster]\ncores = 0\n",
    "blob-topology.toml": '[network]\ntopology = "blob"\n',
    "odd-fat-tree.toml": '[network]\ntopology = "fat-tree:3"\n',
    "half-memory.toml": '[network.memory]\nlatency = "1us"\n',
    "bad-nic.toml": '[network]\nnic_bandwidth = "x"\n',
    "bad-mpi.toml": '[cluster]\nmpi = "lam"\n',
    "no-steps.toml": "[compute]\nseconds_per_sample = 1e-3\n",
    "kind.toml": '[[fault]]\nrank = 1\nstep = 2\nkind = "explode"\n',
    "rank.toml": '[[fault]]\nrank = 9\nstep = 2\nkind = "kill"\n',
    "factor.toml": '[[fault]]\nrank = 1\nstep = 2\nkind = "slow"\nfactor = 0.5\n',
    "when.toml": '[[fault]]\nrank = 1\nwhen = 2\nkind = "kill"\n',
    "faults-table.toml": "[fault]\nrank = 1\n",
    "edges.txt": "0 1\n1 two\n",
    "apart.txt": "0 1\n2 3\n",
    "outside.txt": "0 1\n1 7\n",
    "net.graphml": "<graphml><graph><node id=",
    "speeds.txt": "1x\nfast\n",
    "empty.txt": "",
}

S = "python -m sim.run"
CASES = [  # (flags after BASE, what the one line must name)
    # the algorithm and training flags
    (["--algorithm", "nope"], "--algorithm"),
    (["--mode", "x"], "--mode"),
    (["--lr", "-1"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--lr", "abc"], "--lr"),
    (["--lr", "nan"], "--lr"),
    (["--seed", "-1"], "--seed"),
    (["--seed", "1.5"], "--seed"),
    (["--batch-size", "0"], "--batch-size"),
    (["--batch-size", "1e3"], "--batch-size"),
    (["--batch-size", "100000"], "--batch-size"),
    (["--epochs", "0"], "--epochs"),
    (["--epochs", "inf"], "--epochs"),
    (["--iterations=-5"], "--iterations"),
    (["--eval-every", "0"], "--eval-every"),
    (["--target-accuracy", "1.5"], "--target-accuracy"),
    (["--target-accuracy", "nan"], "--target-accuracy"),
    (["--momentum", "1"], "--momentum"),
    (["--compress", "topk:2"], "--compress"),
    (["--compress", "threshold:nan"], "--compress"),
    (["--compress", "qsgd:0"], "--compress"),
    (["--compress", "zip"], "--compress"),
    (["--compress", "randomk:x"], "--compress"),
    (
        ["--algorithm", "gossip", "--compress", "topk:0.1", "--consensus-step", "0"],
        "--consensus-step",
    ),
    (["--algorithm", "allreduce", "--local-steps", "0"], "--local-steps"),
    (["--algorithm", "ps", "--servers", "0"], "--servers"),
    (["--algorithm", "gossip", "--servers", "2"], "--servers"),
    (["--algorithm", "ps", "--mode", "async", "--server-computes"], "--server-computes"),
    (["--algorithm", "ps", "--mode", "ssp", "--staleness", "-1"], "--staleness"),
    (["--algorithm", "gossip", "--topology", "nope"], "--topology"),
    (["--algorithm", "gossip", "--topology", "random-regular:x"], "--topology"),
    (["--algorithm", "gossip", "--mixing", "nope"], "--mixing"),
    (["--dataset", "nope"], "--dataset"),
    (["--model", "nope"], "--model"),
    (["--optimizer", "nope"], "--optimizer"),
    (["--lr-schedule", "nope"], "--lr-schedule"),
    (["--watchdog", "5"], "--watchdog"),
    (["--watchdog=-1s"], "--watchdog"),
    (["--algorithm", "allreduce", "--mode", "ssp"], "--mode"),
    (["--algorithm", "allreduce", "--topology", "hypercube"], "--topology"),
    (["--algorithm", "allreduce", "--error-feedback"], "--error-feedback"),
    (["--algorithm", "serial", "--compress", "topk:0.1"], "--compress"),
    (["--unknown-flag"], "--unknown-flag"),
    (["--lr"], "--lr"),
    # the cluster flags
    (["--latency", "5"], "--latency"),
    (["--latency", "fast"], "--latency"),
    (["--latency=1e400s"], "--latency"),
    (["--latency=-1us"], "--latency"),
    (["--latency", "5 parsecs"], "--latency"),
    (["--bandwidth", "10G"], "--bandwidth"),
    (["--bandwidth", "0Gbps"], "--bandwidth"),
    (["--bandwidth", "1e400Gbps"], "--bandwidth"),
    (["--bandwidth", "10Gbit"], "--bandwidth"),
    (["--nodes", "0"], "--nodes"),
    (["--nodes=-3"], "--nodes"),
    (["--nodes", "x"], "--nodes"),
    (["--nodes", "1000000000"], "--nodes"),
    (["--speeds", "0x"], "--speeds"),
    (["--speeds", "abc"], "--speeds"),
    (["--speeds", "lognormal:-1"], "--speeds"),
    (["--speeds", "uniform:2:1"], "--speeds"),
    (["--speeds", "1e400x"], "--speeds"),
    (["--stragglers", "abc"], "--stragglers"),
    (["--stragglers", "2:4x"], "--stragglers"),
    (["--stragglers", "0.1:0.5x"], "--stragglers"),
    (["--stragglers", "0.1:4"], "--stragglers"),
    (["--fail", "2"], "--fail"),
    (["--fail", "x@1s"], "--fail"),
    (["--fail", "9@1s"], "--fail"),
    (["--fail", "1@soon"], "--fail"),
    (["--fail=1@-1s"], "--fail"),
    (["--steps-sample", "0"], "--steps-sample"),
    (["--ranks-per-host", "0"], "--ranks-per-host"),
    (["--gamma", "-1"], "--gamma"),
    (["--gamma", "fast"], "--gamma"),
    (["--memory-bandwidth", "0B/s"], "--memory-bandwidth"),
    (["--memory-latency", "-1us"], "--memory-latency"),
    (["--nic-bandwidth", "0GB/s"], "--nic-bandwidth"),
    (["--mpi", "lam"], "--mpi"),
    (["--cores-per-host", "0"], "--cores-per-host"),
    (["--ghost", "nope"], "--ghost"),
    (["--ghost", "resnet50", "--compute", "measured"], "--compute"),
    (["--ghost", "resnet50", "--algorithm", "allreduce", "--compress", "topk:0.1"], "--ghost"),
    (["--compute", "profile"], "--compute"),
    (["--collectives", "nope"], "--collectives"),
    (["--network", "nope"], "--network"),
    (["--network", "fat-tree:x"], "--network"),
    (["--algorithm", "ps", "--nodes", "1"], "--algorithm ps"),
    (["--algorithm", "serial", "--nodes", "4"], "--algorithm serial"),
    # files
    (["--config", "{tmp}/missing.toml"], "{tmp}/missing.toml"),
    (["--config", "{tmp}/binary.toml"], "{tmp}/binary.toml"),
    (["--config", "{tmp}/broken.toml"], "{tmp}/broken.toml"),
    (["--config", "{tmp}/unknown.toml"], "{tmp}/unknown.toml"),
    (["--config", "{tmp}/lr-string.toml"], "{tmp}/lr-string.toml"),
    (["--config", "{tmp}/nodes-string.toml"], "--nodes"),
    (["--config", "{tmp}/nodes-bool.toml"], "{tmp}/nodes-bool.toml"),
    (["--config", "{tmp}"], "{tmp}"),
    (["--profile", "no-such-preset"], "--profile no-such-preset"),
    (["--profile", "{tmp}/broken.toml"], "{tmp}/broken.toml"),
    (["--profile", "{tmp}/binary.toml"], "{tmp}/binary.toml"),
    (["--compute", "profile", "--profile", "{tmp}/negative.toml"], "{tmp}/negative.toml"),
    (["--compute", "profile", "--profile", "{tmp}/nan.toml"], "{tmp}/nan.toml"),
    (["--profile", "{tmp}/slow-latency.toml"], "{tmp}/slow-latency.toml"),
    (["--profile", "{tmp}/no-cores.toml"], "{tmp}/no-cores.toml"),
    (["--profile", "{tmp}/blob-topology.toml"], "{tmp}/blob-topology.toml: [network] topology"),
    (["--profile", "{tmp}/odd-fat-tree.toml"], "{tmp}/odd-fat-tree.toml: [network] topology"),
    (["--profile", "{tmp}/half-memory.toml"], "{tmp}/half-memory.toml: [network.memory]"),
    (["--profile", "{tmp}/bad-nic.toml"], "{tmp}/bad-nic.toml: [network] nic_bandwidth"),
    (["--profile", "{tmp}/bad-mpi.toml"], "{tmp}/bad-mpi.toml: [cluster] mpi"),
    (["--compute", "empirical", "--profile", "{tmp}/no-steps.toml"], "{tmp}/no-steps.toml"),
    (["--profile", "{tmp}"], "{tmp}"),
    (["--faults", "{tmp}/missing.toml"], "{tmp}/missing.toml"),
    (["--faults", "{tmp}/broken.toml"], "{tmp}/broken.toml"),
    (["--faults", "{tmp}/kind.toml"], "{tmp}/kind.toml"),
    (["--faults", "{tmp}/rank.toml"], "--faults"),
    (["--faults", "{tmp}/factor.toml"], "{tmp}/factor.toml"),
    (["--faults", "{tmp}/when.toml"], "{tmp}/when.toml"),
    (["--faults", "{tmp}/faults-table.toml"], "{tmp}/faults-table.toml"),
    (["--faults", "{tmp}/binary.toml"], "{tmp}/binary.toml"),
    (["--network", "{tmp}/net.graphml"], "{tmp}/net.graphml"),
    (["--network", "{tmp}/missing.graphml"], "--network"),
    (["--algorithm", "gossip", "--topology", "{tmp}/edges.txt"], "{tmp}/edges.txt"),
    (["--algorithm", "gossip", "--topology", "{tmp}/apart.txt"], "--topology"),
    (["--algorithm", "gossip", "--topology", "{tmp}/outside.txt"], "{tmp}/outside.txt"),
    (["--algorithm", "gossip", "--topology", "{tmp}/empty.txt"], "{tmp}/empty.txt"),
    (["--speeds", "{tmp}/speeds.txt"], "--speeds"),
    (["--dataset", "mnist", "--data-dir", "{tmp}/nowhere"], "{tmp}/nowhere"),
    (["--out", ""], "--out"),
    (["--out", "{tmp}/unknown.toml"], "{tmp}/unknown.toml"),
    (["--out", "{tmp}/done"], "{tmp}/done"),
]


def _case_id(case):
    return " ".join(case[0]).replace("{tmp}/", "")[:60] or "-"


@pytest.fixture
def corpus_dir(tmp_path):
    """The case's folder: `FILES`, and ``done/``, a finished run folder no case may change."""
    for name, content in FILES.items():
        path = tmp_path / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    assert run.main([*BASE, "--nodes", "2", "--out", str(tmp_path / "done")]) == 0
    return tmp_path


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_line_exit_2(capsys, call, names):
    """Call ``call()``; check it exits 2 with one stderr line naming ``names``; the line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        call()
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert stop.value.code == 2, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert names in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_sim_run_refuses_bad_input_in_one_line(corpus_dir, capsys, monkeypatch, case):
    monkeypatch.setenv("TWINSGD_OFFLINE", "1")
    argv, names = (
        [a.replace("{tmp}", str(corpus_dir)) for a in case[0]],
        case[1].replace("{tmp}", str(corpus_dir)),
    )
    before = _snapshot(corpus_dir)
    out = [] if any(a.startswith("--out") for a in argv) else ["--out", str(corpus_dir / "r")]
    line = _one_line_exit_2(capsys, lambda: run.main([*BASE, *argv, *out]), names)
    assert line.startswith(f"{S}: error: ")
    assert _snapshot(corpus_dir) == before  # no run folder made, nothing changed


def _runs(tmp_path, *names):
    """Finished simulated run folders ``names`` under tmp_path."""
    for name in names:
        assert run.main([*BASE, "--nodes", "2", "--out", str(tmp_path / name)]) == 0


@pytest.mark.parametrize(
    ("damage", "names"),
    [
        (("summary.json", b"[]"), "b/summary.json"),
        (("summary.json", b'{"status": "done"}'), "b/summary.json"),
        (("summary.json", b'{"status": "running"}'), "/b"),
        (("summary.json", b""), "/b"),
        (("summary.json", b"\xff\xfe"), "/b"),
        (("config.json", b"{"), "/b"),
        (("model.npz", b"PK\x03\x04"), "b/model.npz"),
        (("model.npz", b"\x93NUMPY"), "b/model.npz"),
        (("summary.json", None), "/b"),
    ],
)
def test_compare_refuses_a_damaged_run_folder_in_one_line(tmp_path, capsys, damage, names):
    _runs(tmp_path, "a", "b")
    name, content = damage
    path = tmp_path / "b" / name
    path.unlink() if content is None else path.write_bytes(content)
    before = _snapshot(tmp_path)
    _one_line_exit_2(
        capsys, lambda: compare.main([str(tmp_path / "a"), str(tmp_path / "b")]), names
    )
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--grid", "nodes=2,x"], "--nodes"),
        (["--grid", "latency=5"], "--latency"),
        (["--grid", "colour=red"], "colour"),
        (["--grid", "nodes="], "nodes"),
        (["--grid", "nodes"], "nodes"),
        (["--grid", "error-feedback=maybe"], "error-feedback"),
        (["--workers", "0", "--grid", "nodes=2"], "--workers"),
    ],
)
def test_sweep_refuses_a_bad_grid_in_one_line(tmp_path, capsys, argv, names):
    _one_line_exit_2(
        capsys, lambda: sweep.main(["--out", str(tmp_path / "s"), *argv, "--", *BASE]), names
    )
    assert not any((tmp_path / "s").glob("*/config.json"))


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["--seed", "-1"], "--seed"),
        (["--latency", "5us"], "--latency"),
        (["--lr", "inf"], "--lr"),
        (["--faults", "/nonexistent/f.toml"], "/nonexistent/f.toml"),
    ],
)
def test_real_train_refuses_bad_input_in_one_line(tmp_path, argv, names):
    done = subprocess.run(
        [sys.executable, "-m", "real.train", *BASE, *argv, "--out", str(tmp_path / "r")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "TWINSGD_OFFLINE": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and names in lines[0], done.stderr
    assert not (tmp_path / "r").exists()


# -- every parser, fuzzed: a value or ValueError, never another exception -------------------------

TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=30) | st.sampled_from(
    ["5us", "1e400s", "-1s", "nan s", "inf x", "0x", "1e-400ms", "1@1s", "0.5:2x", "10Gbps", ""]
)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_unit_parsers_return_a_finite_value_or_raise_value_error(text):
    for parse in (
        units.parse_seconds,
        units.parse_bandwidth_Bps,
        units.parse_factor,
        units.parse_nbytes,
        units.parse_tc_rate_Bps,
        parse_stragglers,
    ):
        try:
            value = parse(text)
        except ValueError:
            continue
        values = value if isinstance(value, tuple) else (value,)
        assert all(math.isfinite(v) and v >= 0 for v in values), (parse.__name__, text, value)


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_the_fail_spec_parses_or_raises_value_error_naming_the_flag(text):
    try:
        schedule = parse_fail_spec(text)
    except ValueError as err:
        assert str(err).startswith("--fail")
        return
    assert all(f.time_s >= 0 and math.isfinite(f.time_s) for f in schedule.faults)


TOML_VALUES = st.recursive(
    st.booleans()
    | st.integers(-10, 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["rank", "step", "time", "kind", "factor", "steps", "when"]),
            TOML_VALUES,
            max_size=6,
        )
        | TOML_VALUES,
        max_size=3,
    )
)
def test_fault_entries_parse_or_raise_value_error_naming_the_entry(entries):
    try:
        schedule = parse_faults(entries)
    except ValueError as err:
        assert str(err).startswith("--faults: fault ")
        return
    for fault in schedule.faults:
        assert fault.rank >= 0 and fault.factor >= 1 and fault.steps >= 1


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_any_profile_file_loads_or_raises_one_value_error_naming_it(tmp_path_factory, content):
    from sim.cluster_profile import load_profile

    path = tmp_path_factory.mktemp("p") / "p.toml"
    path.write_bytes(content)
    try:
        load_profile(str(path))
    except ValueError as err:
        assert str(err).startswith(f"--profile {path}: ") and "\n" not in str(err)
    shutil.rmtree(path.parent)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "lr",
                "seed",
                "nodes",
                "latency",
                "batch-size",
                "progress",
                "algorithm",
                "colour",
                "epochs",
            ]
        ),
        TOML_VALUES,
        max_size=4,
    )
)
def test_any_config_file_parses_or_exits_2_in_one_line(tmp_path_factory, document):
    import tomli_w

    path = tmp_path_factory.mktemp("c") / "c.toml"
    try:
        path.write_text(tomli_w.dumps(document))
    except (TypeError, ValueError):
        return  # not representable in TOML
    parser = run.build_parser(CheckingParser)
    try:
        run.parse_command(["--config", str(path)], parser)
    except ValueError as err:
        assert "\n" not in str(err)
    shutil.rmtree(path.parent)


def test_the_corpus_is_large_and_no_code_loads_pickle():
    assert len(CASES) >= 100
    for path in ROOT.glob("*/**/*.py"):
        if ".venv" in path.parts or path.parts[-2] == "tests":
            continue
        text = path.read_text()
        assert "allow_pickle=True" not in text and "pickle.load" not in text, path


def test_download_of_an_unknown_data_set_is_one_line_naming_the_known_ones(capsys):
    from twinsgd.data.download import main as download

    line = _one_line_exit_2(capsys, lambda: download(["nope"]), "nope")
    assert all(name in line for name in ("mnist", "fashion-mnist", "cifar10", "cifar100"))


LONG = "x" * 300  # longer than a file name may be (255 bytes on ext4, tmpfs, xfs)


@pytest.mark.parametrize(
    "command",
    [
        ["sim.run", "--nodes", "2", "--dataset", "synthetic", "--iterations", "2", "--out"],
        ["real.train", "--dataset", "synthetic", "--iterations", "2", "--out"],
        ["sim.sweep", "--grid", "nodes=2", "--out"],
        ["twinsgd.analysis.validate", "--networks", "shm", "--repeats", "1", "--out"],
        ["sim.calibrate", "--from-osu", "{osu}", "--out"],
        ["twinsgd.analysis.plot", "breakdown", "{run}", "--out"],
    ],
    ids=lambda c: c[0],
)
def test_an_out_path_too_long_for_the_file_system_is_one_line_naming_out(tmp_path, command):
    osu = tmp_path / "lat.txt"
    osu.write_text("# OSU MPI Latency Test v5\n# Size Latency (us)\n8 1.0\n1024 2.0\n4096 4.0\n")
    _runs(tmp_path, "done")
    argv = [a.replace("{osu}", str(osu)).replace("{run}", str(tmp_path / "done")) for a in command]
    target = tmp_path / LONG / ("f.toml" if "calibrate" in command[0] else "")
    suffix = [".png"] if "plot" in command[0] else []
    done = subprocess.run(
        [sys.executable, "-m", *argv, str(target) + "".join(suffix)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TWINSGD_OFFLINE": "1"},
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-500:]
    assert len(lines) == 1 and "--out" in lines[0] and "too long" in lines[0], lines
