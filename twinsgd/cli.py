"""The command-line contract every twinsgd command keeps: bad input is one line on stderr and exit
status 2, never argparse's usage block and never a traceback; results go to stdout, and what a
command says along the way (notes on what a default chose, progress, warnings, failures) goes
through `logging` to stderr as ``PROG: message``, at the level ``-q/--quiet`` or ``-v/--verbose``
set. Imports nothing but the standard library, so every layer's commands (the data downloader's
too) can use it.

Modules log to ``logging.getLogger(__name__)``; `set_up_logging` sets the level of this project's
packages (`PACKAGES`), so a library's own debugging stays quiet under ``--verbose``.
"""

import argparse
import logging
import sys

# this project's packages, and the command run as ``python -m PACKAGE.MODULE`` (its __name__)
PACKAGES = ("twinsgd", "real", "sim", "topologies", "benchmarks", "__main__")
LEVELS = {"quiet": logging.WARNING, "normal": logging.INFO, "verbose": logging.DEBUG}


class _Prefixed(logging.Formatter):
    """``PROG: message``, with ``warning: `` before a warning (an error's message says what
    failed: ``run stopped: ...``, ``interrupted (SIGINT)``)."""

    def __init__(self, prog):
        super().__init__()
        self.prog = prog

    def format(self, record):
        kind = "warning: " if record.levelno == logging.WARNING else ""
        return f"{self.prog}: {kind}{record.getMessage()}"


class _Stderr(logging.StreamHandler):
    """A handler that writes to ``sys.stderr`` as it is when a record comes, not as it was when
    the handler was made (a caller that swaps stderr, as pytest does, gets the records)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _):
        """The stream is always the current sys.stderr."""


def set_up_logging(prog, level="normal"):
    """Send this project's log records to stderr as ``PROG: message`` at ``level`` (a key of
    `LEVELS`): "quiet" keeps warnings and errors, "verbose" adds debugging detail. Called once a
    command has parsed its flags; calling again replaces the earlier set-up."""
    handler = _Stderr()
    handler.setFormatter(_Prefixed(prog))
    handler.set_name("twinsgd")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "twinsgd"]:
        root.removeHandler(old)
    root.addHandler(handler)
    for package in PACKAGES:
        logging.getLogger(package).setLevel(LEVELS[level])


def progress_shown():
    """Whether progress bars belong on stderr: not under ``--quiet``."""
    return logging.getLogger("twinsgd").isEnabledFor(logging.INFO)


def add_output_level(parser):
    """Add ``-q/--quiet`` and ``-v/--verbose`` (one or neither) to ``parser``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        action="store_const",
        dest="output_level",
        const="quiet",
        default="normal",
        help="say only warnings and errors on stderr (no notes, no progress bar)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_const",
        dest="output_level",
        const="verbose",
        help="say more on stderr: what each step of the command does",
    )


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit status 2 (the command-line contract;
    argparse's own error prints the usage first), with ``-q/--quiet`` and ``-v/--verbose``: once
    the flags parse, logging is set up at the level they give (`set_up_logging`)."""

    sets_up_logging = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        add_output_level(self)

    def parse_known_args(self, args=None, namespace=None):
        parsed, rest = super().parse_known_args(args, namespace)
        if self.sets_up_logging:
            set_up_logging(self.prog, getattr(parsed, "output_level", "normal"))
        return parsed, rest

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


class CheckingParser(OneLineParser):
    """A parser whose errors raise ValueError(message): to check a command line before running
    it (a sweep's points, a validation's configurations). Sets up no logging."""

    sets_up_logging = False

    def error(self, message):
        raise ValueError(message)
