"""The argument parser of the commands that run under mpiexec."""

import sys

from mpi4py import MPI

from algorithms.config import OneLineParser


class RankZeroParser(OneLineParser):
    """argparse whose errors are one line, printed by rank 0 only; every rank exits 2 (so a bad
    flag under ``mpiexec -n 16`` prints one line, not sixteen)."""

    def error(self, message):
        if MPI.COMM_WORLD.rank == 0:
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)
