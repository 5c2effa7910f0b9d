"""Under mpiexec: `real.stack_cpu.stack_cpu` (quick) with stand-in compute windows on rank 0,
a step of 1 s without the transfer and 1.25 s with it (a fifth of the compute lost); prints
the result as JSON on rank 0."""

import json

from real.mpi import MPI
from real.stack_cpu import stack_cpu

comm = MPI.COMM_WORLD
windows = []


def start(seconds):
    windows.append(seconds)


def finish():
    step = 1.25 if len(windows) % 2 == 0 else 1.0  # off, on, off, on, ...
    return [step, step]


result = stack_cpu(comm, quick=True, compute=(start, finish) if comm.rank == 0 else None)
if comm.rank == 0:
    print(json.dumps({**result, "windows": len(windows)}))
else:
    assert result is None
