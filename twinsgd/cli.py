"""The command-line contract every twinsgd command keeps: bad input is one line on stderr and exit
status 2, never argparse's usage block and never a traceback. Imports nothing but the standard
library, so every layer's commands (the data downloader's too) can use it."""

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit status 2 (the command-line contract;
    argparse's own error prints the usage first)."""

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


class CheckingParser(OneLineParser):
    """A parser whose errors raise ValueError(message): to check a command line before running
    it (a sweep's points, a validation's configurations)."""

    def error(self, message):
        raise ValueError(message)
