"""The run configuration: defaults, TOML, flags over TOML, and one-line exit-2 errors."""

import argparse
import json

import pytest

from twinsgd.run.config import (
    DEFAULT_LR,
    MIN_DEFAULT_STEPS,
    RunConfig,
    add_config_arguments,
    parse_config,
)


def _parse(argv):
    return parse_config(argv, add_config_arguments(argparse.ArgumentParser(prog="t")))


def test_defaults_are_the_baseline_run():
    cfg = _parse([])
    assert (cfg.algorithm, cfg.dataset, cfg.model) == ("auto", "mnist", "mlp")
    assert cfg.optimizer == "adam"
    assert (cfg.lr, cfg.batch_size, cfg.epochs, cfg.seed) == (0.003, 100, 2, 0)
    assert cfg.lr_schedule == "cosine"
    assert cfg.out is None and cfg.check_size(1).run_name == "serial-mnist"  # front end: folder


@pytest.mark.parametrize("optimizer", sorted(DEFAULT_LR))
def test_learning_rate_defaults_per_optimizer(optimizer):
    assert _parse(["--optimizer", optimizer]).lr == DEFAULT_LR[optimizer]


def test_toml_sets_and_flags_override(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('dataset = "fashion-mnist"\nbatch-size = 32\nlr = 0.01\nprogress = false\n')
    cfg = _parse(["--config", str(path), "--lr", "0.05"])
    assert (cfg.dataset, cfg.batch_size, cfg.lr, cfg.progress) == ("fashion-mnist", 32, 0.05, False)


def test_config_round_trips_through_json():
    cfg = _parse(["--epochs", "3", "--target-accuracy", "0.9"])
    assert RunConfig(**json.loads(json.dumps(cfg.as_dict()))) == cfg


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--algorithm", "nope"], "invalid choice: 'nope'"),
        (["--lr", "-1"], "--lr must be a finite number > 0, got -1.0"),
        (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
        (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),
        (["--lr", "abc"], "invalid float value: 'abc'"),
        (["--batch-size", "0"], "--batch-size must be a finite number > 0, got 0"),
        (["--target-accuracy", "97"], "--target-accuracy must be in (0, 1], got 97.0"),
        (["--momentum", "1"], "--momentum must be in [0, 1), got 1.0"),
        (["--epochs", "0"], "--epochs must be a finite number > 0, got 0"),
    ],
)
def test_bad_flags_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("batch-size = 1.5\n", "batch-size must be int, got 1.5"),
        ("colour = 'red'\n", "unknown option 'colour'"),
        ("lr = [1\n", "not valid TOML"),
        ("dataset = 'imagenet'\n", "--dataset must be one of"),
    ],
)
def test_bad_toml_exits_2_naming_the_file(tmp_path, text, message, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SystemExit) as exc:
        _parse(["--config", str(path)])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_missing_toml_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _parse(["--config", str(tmp_path / "absent.toml")])
    assert "absent.toml: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("size", "algorithm"), [(1, "serial"), (2, "allreduce"), (16, "allreduce")]
)
def test_auto_is_serial_on_one_process_and_allreduce_on_more(size, algorithm):
    assert _parse([]).check_size(size).algorithm == algorithm
    assert _parse(["--algorithm", "serial"]).check_size(1).algorithm == "serial"


def test_auto_keeps_the_rules_of_what_it_becomes():
    assert _parse(["--local-steps", "4"]).check_size(4).algorithm == "allreduce"
    with pytest.raises(
        ValueError, match="--local-steps 4 needs --algorithm allreduce or gossip, got serial"
    ):
        _parse(["--local-steps", "4"]).check_size(1)


def test_default_batch_shrinks_to_fit_a_small_shard_and_says_so():
    cfg = _parse([])
    notes = cfg.fit_data(47)  # 10,000 bundled images over 210 shards
    assert cfg.batch_size == 32  # largest power of two <= 47
    assert notes[0] == (
        "batch size 32 per node: the default 100 does not fit a node's shard "
        "of 47 images (set --batch-size)"
    )


def test_default_length_grows_to_the_minimum_steps_and_says_so():
    cfg = _parse([])
    notes = cfg.fit_data(285)  # 60,000 images over 210 shards: 2 steps per epoch
    assert (cfg.batch_size, cfg.iterations) == (100, MIN_DEFAULT_STEPS)
    assert notes == [
        f"{MIN_DEFAULT_STEPS} steps ({MIN_DEFAULT_STEPS / 2:.3g} epochs): 2 epochs "
        f"are only 4 steps of 2 per epoch here (set --epochs or --iterations)"
    ]


def test_a_run_that_fits_is_left_alone():
    cfg = _parse([])
    assert cfg.fit_data(60000) == [] and (cfg.batch_size, cfg.iterations) == (100, None)


@pytest.mark.parametrize(
    "argv", [["--batch-size", "100"], ["--epochs", "2"], ["--iterations", "3"]]
)
def test_what_the_user_set_is_kept(argv, tmp_path):
    cfg = _parse(argv)
    cfg.fit_data(47)
    assert cfg.batch_size == (100 if "--batch-size" in argv else 32)
    assert (
        cfg.iterations == {"--iterations": 3, "--epochs": None, "--batch-size": None}[argv[0]]
    )  # batch 100 is refused later
    toml = tmp_path / "run.toml"
    toml.write_text("batch-size = 100\n")
    cfg = _parse(["--config", str(toml)])  # set in a TOML file counts as set
    cfg.fit_data(47)
    assert cfg.batch_size == 100


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--algorithm", "allreduce", "--mode", "async"],
            "--mode async needs --algorithm ps, got --algorithm allreduce",
        ),
        (
            ["--algorithm", "ps", "--staleness", "2"],
            "--staleness 2 needs --algorithm ps --mode ssp, got --algorithm ps --mode sync",
        ),
        (
            ["--algorithm", "ps", "--allreduce", "mpi"],
            "--allreduce mpi needs --algorithm allreduce, got --algorithm ps --mode sync",
        ),
        (
            ["--algorithm", "allreduce", "--topology", "hypercube"],
            "--topology hypercube needs --algorithm gossip, got --algorithm allreduce",
        ),
        (
            ["--algorithm", "gossip", "--consensus-step", "0.5"],
            "--consensus-step 0.5 needs --algorithm gossip with --compress, got --algorithm gossip "
            "--compress none",
        ),
        (
            ["--algorithm", "allreduce", "--error-feedback"],
            "--error-feedback needs --compress, got --algorithm allreduce --compress none",
        ),
    ],
)
def test_a_flag_the_run_would_ignore_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"t: error: {message}"


def test_a_flag_at_its_default_is_not_refused():
    assert (
        _parse(["--algorithm", "allreduce", "--mode", "sync", "--topology", "ring"]).mode == "sync"
    )


@pytest.mark.parametrize("command", ["real.train", "sim.run"])
def test_version_prints_the_package_version(command):
    import subprocess
    import sys

    import twinsgd

    done = subprocess.run(
        [sys.executable, "-m", command, "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == f"twinsgd {twinsgd.__version__}"
    assert twinsgd.__version__ not in ("", "unknown")


def test_the_version_falls_back_to_pyproject_when_the_package_is_not_installed(monkeypatch):
    """A source checkout run from PYTHONPATH, never installed: the run header's version comes
    from pyproject.toml instead of crashing (PackageNotFoundError)."""
    import importlib.metadata
    import tomllib
    from pathlib import Path

    import twinsgd

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(twinsgd._metadata, "version", not_installed)
    with open(Path(twinsgd.__file__).parents[1] / "pyproject.toml", "rb") as fh:
        assert twinsgd._version() == tomllib.load(fh)["project"]["version"]
