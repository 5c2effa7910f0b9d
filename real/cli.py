"""The argument parser of the commands that run under mpiexec."""

import sys

from real.mpi import MPI
from twinsgd.cli import OneLineParser


class RankZeroParser(OneLineParser):
    """argparse whose errors are one line, printed by rank 0 only; every rank exits 2 (so a bad
    flag under ``mpiexec -n 16`` prints one line, not sixteen)."""

    def error(self, message):
        if MPI.COMM_WORLD.rank == 0:
            print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


class BadInput(Exception):
    """One line of bad input found on this rank (the message, without the program's name)."""


class CollectiveParser(OneLineParser):
    """argparse whose errors raise `BadInput`, so that the ranks can agree (`agree`) before
    any of them exits: a rank exiting alone leaves the others waiting in the next collective."""

    def error(self, message):
        raise BadInput(message)


def agree(comm, problem, prog):
    """Collective: each rank says whether it found bad input (a message, or None). If any did,
    rank 0 prints the first, naming the rank that found it, and every rank exits 2."""
    problems = comm.allgather(problem)
    for rank, message in enumerate(problems):
        if message is not None:
            if comm.rank == 0:
                where = f" (on rank {rank})" if rank else ""
                print(f"{prog}: error: {message}{where}", file=sys.stderr)
            sys.exit(2)
