"""What the commands say on stderr: one logging set-up (`twinsgd.cli.set_up_logging`), ``PROG:
message`` lines, ``-q/--quiet`` down to warnings and errors, ``-v/--verbose`` up to debugging
detail; results stay on stdout whatever the level."""

import ast
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from twinsgd.cli import PACKAGES, OneLineParser, progress_shown, set_up_logging

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
GHOST = ["--ghost", "resnet50", "--nodes", "4", "--iterations", "3", "--eval-every", "2"]
GHOST_NOTE = "python -m sim.run: --ghost has no values to evaluate: --eval-every 2 ignored"


@pytest.fixture
def restore_logging():
    root = logging.getLogger()
    handlers, levels = list(root.handlers), {p: logging.getLogger(p).level for p in PACKAGES}
    yield
    root.handlers[:] = handlers
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.parametrize(
    ("level", "said"),
    [
        ("quiet", ["prog: warning: w", "prog: e"]),
        ("normal", ["prog: i", "prog: warning: w", "prog: e"]),
        ("verbose", ["prog: d", "prog: i", "prog: warning: w", "prog: e"]),
    ],
)
def test_each_level_says_what_it_promises_as_prog_colon_message(
    level, said, capsys, restore_logging
):
    set_up_logging("prog", level)
    set_up_logging("prog", level)  # a second set-up replaces the first: no line twice
    log = logging.getLogger("sim.some_module")
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    logging.getLogger("somelibrary").debug("a library's debugging stays quiet")
    assert capsys.readouterr().err.splitlines() == said
    assert progress_shown() == (level != "quiet")


def test_the_command_run_as_main_is_set_up_too(capsys, restore_logging):
    set_up_logging("prog", "normal")
    logging.getLogger("__main__").info("from python -m")
    assert capsys.readouterr().err == "prog: from python -m\n"


def test_every_parser_takes_quiet_or_verbose_not_both(capsys, restore_logging):
    parser = OneLineParser(prog="prog")
    assert parser.parse_args(["-q"]).output_level == "quiet"
    assert parser.parse_args(["--verbose"]).output_level == "verbose"
    assert parser.parse_args([]).output_level == "normal"
    with pytest.raises(SystemExit) as stop:
        parser.parse_args(["-q", "-v"])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "prog: error: argument -v/--verbose: not allowed with argument -q/--quiet"
    ]


def _sim_run(tmp_path, *flags):
    cmd = [sys.executable, "-m", "sim.run", *GHOST, "--out", str(tmp_path / "r"), *flags]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_sim_run_says_notes_by_default_nothing_when_quiet_and_more_when_verbose(tmp_path):
    normal = _sim_run(tmp_path, "--overwrite")
    assert normal.stderr.splitlines() == [GHOST_NOTE]
    quiet = _sim_run(tmp_path, "--overwrite", "--quiet")
    assert quiet.stderr == ""
    assert quiet.stdout == normal.stdout  # the result, whatever the level
    verbose = _sim_run(tmp_path, "--overwrite", "-v").stderr.splitlines()
    assert verbose[0].startswith("python -m sim.run: cluster: 4 ranks, one a host; star")
    assert GHOST_NOTE in verbose
    assert verbose[-1].startswith("python -m sim.run: simulated ")


def test_real_train_under_mpiexec_says_once_and_is_quiet_when_asked(tmp_path):
    def train(*flags):
        cmd = [MPIEXEC, "-n", "2", sys.executable, "-m", "real.train", "--iterations", "2"]
        cmd += ["--dataset", "mnist-subset", "--no-progress", "--overwrite"]
        cmd += ["--out", str(tmp_path / "r"), *flags]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "test accuracy" in done.stdout
        return done.stderr.splitlines()

    assert train("-q") == []
    (said,) = train("--verbose")  # rank 0 alone says where the ranks ran
    assert said.startswith("python -m real.train: 2 rank(s) on 1 host(s)")


def _stderr_prints(path):
    """Lines of ``path`` that print to sys.stderr (or write to it) by hand."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = ast.unparse(node.func)
            to_stderr = any(
                k.arg == "file" and ast.unparse(k.value) == "sys.stderr" for k in node.keywords
            )
            if (target == "print" and to_stderr) or target == "sys.stderr.write":
                yield node.lineno


def test_commands_speak_through_logging_not_prints_to_stderr():
    # the one-line contract of bad input is printed before logging is set up, and real.cluster's
    # _enter runs in the child that becomes an emulated host's rank, with no parser at all
    # and real/mpi.py refuses a launcher it cannot serve at import, before any parser exists
    allowed = {"twinsgd/cli.py", "real/cli.py", "real/cluster.py", "real/mpi.py"}
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for folder in ("real", "sim", "twinsgd", "topologies", "models")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in allowed
        for line in _stderr_prints(path)
    ]
    assert found == []
