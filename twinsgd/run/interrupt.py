"""Ctrl-C at a command line: one line on stderr and exit status 130 (128 + SIGINT), never a
traceback. The run folder, if any, has already said so (``failed: interrupted``)."""

import functools
import sys


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
                print(f"{prog}: interrupted (SIGINT)", file=sys.stderr)
                return 130

        return wrapped

    return decorate
