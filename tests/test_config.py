"""The run configuration: defaults, TOML, flags over TOML, and one-line exit-2 errors."""

import argparse
import json

import pytest

from algorithms.config import DEFAULT_LR, RunConfig, add_config_arguments, parse_config


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


@pytest.mark.parametrize(("argv", "message"), [
    (["--algorithm", "nope"], "invalid choice: 'nope'"),
    (["--lr", "-1"], "--lr must be > 0, got -1.0"),
    (["--lr", "abc"], "invalid float value: 'abc'"),
    (["--batch-size", "0"], "--batch-size must be > 0, got 0"),
    (["--target-accuracy", "97"], "--target-accuracy must be in (0, 1], got 97.0"),
    (["--momentum", "1"], "--momentum must be in [0, 1), got 1.0"),
    (["--epochs", "0"], "--epochs must be > 0, got 0"),
])
def test_bad_flags_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


@pytest.mark.parametrize(("text", "message"), [
    ("batch-size = 1.5\n", "batch-size must be int, got 1.5"),
    ("colour = 'red'\n", "unknown option 'colour'"),
    ("lr = [1\n", "not valid TOML"),
    ("dataset = 'imagenet'\n", "--dataset must be one of"),
])
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


@pytest.mark.parametrize(("size", "algorithm"),
                         [(1, "serial"), (2, "allreduce"), (16, "allreduce")])
def test_auto_is_serial_on_one_process_and_allreduce_on_more(size, algorithm):
    assert _parse([]).check_size(size).algorithm == algorithm
    assert _parse(["--algorithm", "serial"]).check_size(1).algorithm == "serial"


def test_auto_keeps_the_rules_of_what_it_becomes():
    assert _parse(["--local-steps", "4"]).check_size(4).algorithm == "allreduce"
    with pytest.raises(ValueError, match="--local-steps 4 needs --algorithm allreduce or gossip, "
                                         "got serial"):
        _parse(["--local-steps", "4"]).check_size(1)
