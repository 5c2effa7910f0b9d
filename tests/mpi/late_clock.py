"""Under mpiexec -n 2: rank 1 starts its clock LATE seconds after rank 0 (as a rank past the
cores leaves the starting barrier a turn late), then rank 0 sends and rank 1 receives at once.
Prints, on rank 0, each rank's timeline as JSON: on the run's common start (`real.train.
_clock_origin`), rank 1's receive ends after rank 0's send began."""

import json
import sys
import time
from types import SimpleNamespace

import numpy as np
from mpi4py import MPI

from real.backend import Driver
from real.train import _clock_origin, boot_id
from twinsgd.programs.ops import Recv, Send

LATE = float(sys.argv[1])
comm = MPI.COMM_WORLD
where = comm.allgather((MPI.Get_processor_name(), boot_id(), 0))


class Log:
    def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
        """Nothing kept: the timeline is what is looked at."""


def program(rank):
    buf = np.zeros(4)
    if rank == 0:
        yield Send(dest=1, payload=buf)
    else:
        yield Recv(source=0, buf=buf)


comm.Barrier()
origin = _clock_origin(comm, where)
if comm.rank == 1:
    time.sleep(LATE)
node = SimpleNamespace(rank=comm.rank, size=comm.size, start_iteration=0, reporter=0)
driver = Driver(node, Log(), comm, measure_wait=False, clock_origin=origin)
driver.run(program(comm.rank))
timelines = comm.gather(driver.timeline(), root=0)
if comm.rank == 0:
    print(json.dumps(timelines))
