"""Which algorithm an MPI library runs for an allreduce, by message size and communicator size:
the name of the node program (`programs.collectives`, `programs.block_collectives`) that does
what the library does, so the simulator can run the library's choice.

Libraries:

- ``mpich`` (and MPICH-derived: Intel MPI, MVAPICH, Cray MPICH by default): allreduce
  `collectives.mpich_allreduce` (``MPIR_Allreduce_intra_auto``: recursive doubling up to 2 KiB,
  Rabenseifner's above); allgather around a ring for long messages (``MPIR_CVAR_ALLGATHER_
  LONG_MSG_SIZE``, 512 KiB in all); alltoall by pairwise exchange from 32 KiB a block.
- ``openmpi`` (Open MPI 4.0's ``coll/tuned`` fixed decisions, ``ompi_coll_tuned_allreduce_intra_
  dec_fixed`` in ``ompi/mca/coll/tuned/coll_tuned_decision_fixed.c``, v4.0.x): allreduce by
  recursive doubling below 10,000 bytes (``intermediate_message``), else around a ring (segmented
  into 1 MiB pieces past ``size`` MiB, the same alpha-beta cost); alltoall pairwise from 3,000
  bytes a block; allgather: neighbour exchange (even sizes) or a ring from 50,000 bytes in all.
  Open MPI 4.1 changed these rules (Rabenseifner's for large allreduces); they are not here.

Allgather and alltoall are simulated as a ring and pairwise exchange (`sim.osu`), the choice of
both libraries for large blocks; for small blocks they run Bruck's, recursive doubling or Open
MPI's neighbour exchange, which have no program here yet.
"""

from twinsgd.programs.collectives import mpich_allreduce

LIBRARIES = ("mpich", "openmpi")
OPENMPI_ALLREDUCE_INTERMEDIATE_BYTES = 10_000  # v4.0.x coll_tuned_decision_fixed.c


def allreduce_algorithm(library, count, itemsize, size):
    """The allreduce program (``ring``, ``recursive-doubling``, ``rabenseifner``) ``library``
    runs for ``count`` elements of ``itemsize`` bytes on ``size`` ranks.

    >>> allreduce_algorithm("openmpi", 2500, 4, 64), allreduce_algorithm("mpich", 2500, 4, 64)
    ('ring', 'rabenseifner')
    >>> allreduce_algorithm("openmpi", 2499, 4, 64)
    'recursive-doubling'
    """
    _check(library)
    if library == "mpich":
        return mpich_allreduce(count, itemsize, size)
    return (
        "recursive-doubling" if count * itemsize < OPENMPI_ALLREDUCE_INTERMEDIATE_BYTES else "ring"
    )


def _check(library):
    if library not in LIBRARIES:
        raise ValueError(f"--mpi must be one of {', '.join(LIBRARIES)}, got {library!r}")
