"""Ctrl-C at a command line: one line on stderr and exit status 130 (128 + SIGINT), never a
traceback. The run folder, if any, has already said so (``failed: interrupted``). A reader
that stops early (``sim.osu ... | head``) ends a command quietly, as it ends ``cat``."""

import functools
import logging
import os
import sys

from twinsgd.cli import set_up_logging


def one_line_on_interrupt(prog):
    """Decorate a command's ``main``: a KeyboardInterrupt becomes ``prog: interrupted`` and 130.

    >>> @one_line_on_interrupt("python -m demo")
    ... def main():
    ...     raise KeyboardInterrupt
    >>> main()
    130
    """

    def decorate(main):
        @functools.wraps(main)
        def wrapped(*args, **kwargs):
            try:
                return main(*args, **kwargs)
            except KeyboardInterrupt:
                if not logging.getLogger().handlers:  # main called before its parser ran
                    set_up_logging(prog)
                logging.getLogger(__name__).error("interrupted (SIGINT)")
                return 130
            except BrokenPipeError:  # | head had enough: no traceback, none at exit either
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return 0

        return wrapped

    return decorate
