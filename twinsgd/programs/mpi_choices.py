"""Which algorithm an MPI library runs for an allreduce, by message size and communicator size:
the name of the node program (`programs.collectives`, `programs.block_collectives`) that does
what the library does, so the simulator can run the library's choice.

Libraries (``--mpi``, a profile's ``[cluster] mpi``):

- ``mpich`` (and MPICH-derived: Intel MPI, MVAPICH, Cray MPICH by default): MPICH 4 and 5's
  built-in selection (the JSON in libmpi; read from the 5.0.2 wheel), which keeps MPICH 3's
  CVAR thresholds but for allreduce: `collectives.mpich_allreduce` (recursive doubling up to 8
  bytes, MPICH 3's up to 2 KiB; Rabenseifner's above); allgather around a ring for long
  messages (512 KiB in all); alltoall by pairwise exchange above 32 KiB a block; broadcast
  (`bcast_algorithm`). Where all ranks share one node, MPICH 4+ runs its own shared-memory
  collectives (``release_gather``) for some of these; they are not modelled. Nor are its
  node-aware compositions where a communicator spans nodes of several ranks each (the ch4
  selection in the same wheel: ``comm_hierarchy=parent`` takes ``composition_alpha`` for
  barrier, allreduce of a commutative operation and bcast of fewer than 8 ranks or below
  12,288 bytes: within each node, then among one rank a node, then within each node again);
  `real.cluster`'s emulated hosts set ``MPIR_CVAR_NOLOCAL``, which makes every rank a node.
- ``openmpi``: Open MPI 4.0's ``coll/tuned`` fixed decisions (``ompi_coll_tuned_allreduce_intra_
  dec_fixed`` in ``ompi/mca/coll/tuned/coll_tuned_decision_fixed.c``, v4.0.x): allreduce by
  recursive doubling below 10,000 bytes (``intermediate_message``), else around a ring (segmented
  into 1 MiB pieces past ``size`` MiB, the same alpha-beta cost) when there are more elements
  than ranks, else a reduce and a broadcast (``nonoverlapping``); alltoall pairwise from 3,000
  bytes a block; allgather: neighbour exchange (even sizes) or a ring from 50,000 bytes in all.
- ``openmpi-4.1``: Open MPI 4.1's rewritten fixed decisions for allreduce (the same file, v4.1.x,
  as SimGrid 3.32 mirrors them in ``src/smpi/colls/smpi_openmpi_selector.cpp``,
  ``allreduce__ompi``): a table of message-size thresholds per communicator size, choosing among
  recursive doubling, the ring, the segmented ring (simulated as the ring: the same alpha-beta
  cost), Rabenseifner's reduce-scatter + allgather and ``nonoverlapping`` (a reduce, then a
  broadcast, each as the library picks it: `reductions.library_reduce_bcast`); its alltoall
  and allgather rules too (`alltoall_algorithm`, `allgather_algorithm`), and its reduce
  table (`reduce_algorithm`) and its broadcast table of nine algorithms, unsegmented
  (`bcast_algorithm`).

Open MPI's ring and Rabenseifner's fall back to recursive doubling with fewer elements than
ranks (than p', the largest power of two <= size, for Rabenseifner's), as both libraries' code
does. Alltoall: each library's choice among pairwise exchange, all at once (linear) and Bruck's
(`alltoall_algorithm`); allgather among the ring, recursive doubling, Bruck's and neighbour
exchange (`allgather_algorithm`). Broadcast: MPICH's binomial tree or scatter + allgather,
Open MPI 4.0's binomial tree, split binary tree or pipeline, and 4.1's table of these, the
linear one, the binary, binomial and 4-nomial trees and the scatter + allgathers
(`bcast_algorithm`). Reduce:
MPICH's binomial tree or reduce-scatter and gather; Open MPI 4.0's linear, in-order binomial,
binary tree or pipeline, with their segments, and 4.1's table of these, the in-order binary tree
and the reduce-scatter and gather, unsegmented (`reduce_algorithm`).
"""

import math
import re

from twinsgd.programs.collectives import mpich_allreduce

LIBRARIES = ("mpich", "openmpi", "openmpi-4.1")
OPENMPI_ALLREDUCE_INTERMEDIATE_BYTES = 10_000  # v4.0.x coll_tuned_decision_fixed.c

# Open MPI 4.1's allreduce for commutative operations (v4.1.x coll_tuned_decision_fixed.c,
# ompi_coll_tuned_allreduce_intra_dec_fixed): for communicators of fewer than the first number
# of ranks, the first algorithm whose bound (bytes in all, exclusive) the message is under.
# "segmented-ring" is simulated as "ring".
OPENMPI_41_ALLREDUCE = (
    (4, ((8, "ring"), (4096, "recursive-doubling"), (8192, "ring"),
         (16384, "recursive-doubling"), (65536, "ring"), (262144, "segmented-ring"),
         (math.inf, "rabenseifner"))),
    (8, ((16, "ring"), (8192, "recursive-doubling"), (math.inf, "rabenseifner"))),
    (16, ((8192, "recursive-doubling"), (math.inf, "rabenseifner"))),
    (32, ((64, "segmented-ring"), (4096, "recursive-doubling"), (math.inf, "rabenseifner"))),
    (64, ((128, "segmented-ring"), (math.inf, "rabenseifner"))),
    (128, ((262144, "recursive-doubling"), (math.inf, "rabenseifner"))),
    (256, ((131072, "nonoverlapping"), (262144, "recursive-doubling"),
           (math.inf, "rabenseifner"))),
    (512, ((4096, "nonoverlapping"), (math.inf, "rabenseifner"))),
    (2048, ((2048, "nonoverlapping"), (16384, "recursive-doubling"),
            (math.inf, "rabenseifner"))),
    (4096, ((2048, "nonoverlapping"), (4096, "segmented-ring"), (16384, "recursive-doubling"),
            (math.inf, "rabenseifner"))),
    (math.inf, ((2048, "nonoverlapping"), (16384, "segmented-ring"),
                (32768, "recursive-doubling"), (math.inf, "rabenseifner"))),
)  # fmt: skip
# Open MPI's -> ours (a reduce's chain of fan-out 0 is forced to 1 by Open MPI: the pipeline)
PROGRAM = {"segmented-ring": "ring", "nonoverlapping": "reduce-bcast", "chain": "pipeline"}


def allreduce_algorithm(library, count, itemsize, size):
    """The allreduce program (``ring``, ``recursive-doubling``, ``rabenseifner``,
    ``reduce-bcast``) ``library`` runs for ``count`` elements of ``itemsize`` bytes on ``size``
    ranks (a sum: commutative).

    >>> allreduce_algorithm("openmpi", 2500, 4, 64), allreduce_algorithm("mpich", 2500, 4, 64)
    ('ring', 'rabenseifner')
    >>> allreduce_algorithm("openmpi", 2499, 4, 64), allreduce_algorithm("openmpi", 2500, 4, 4096)
    ('recursive-doubling', 'reduce-bcast')
    >>> [allreduce_algorithm("openmpi-4.1", n, 4, 64) for n in (65535, 65536)]
    ['recursive-doubling', 'rabenseifner']
    """
    _check(library)
    if library == "mpich":
        return mpich_allreduce(count, itemsize, size)
    nbytes = count * itemsize
    if library == "openmpi":
        if nbytes < OPENMPI_ALLREDUCE_INTERMEDIATE_BYTES:
            return "recursive-doubling"
        return "ring" if count > size else "reduce-bcast"
    chosen = _look_up(OPENMPI_41_ALLREDUCE, size, nbytes)
    algorithm = PROGRAM.get(chosen, chosen)
    pof2 = 1 << (max(size, 1).bit_length() - 1)
    if (algorithm == "ring" and count < size) or (algorithm == "rabenseifner" and count < pof2):
        return "recursive-doubling"  # both fall back (ompi_coll_base_allreduce_intra_*)
    return algorithm


# Alltoall, by the bytes of one block (exclusive bounds, as above). MPICH's MPIR_Alltoall_intra_
# auto: Bruck's up to MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE (256) on 8 ranks or more, "scattered"
# (all at once, 32 requests at a time) up to MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE (32768), else
# pairwise. Open MPI 4.0 (v4.0.x ompi_coll_tuned_alltoall_intra_dec_fixed): Bruck's below 200
# bytes on more than 12 ranks, basic_linear below 3,000, else pairwise. Open MPI 4.1 (v4.1.x,
# as SimGrid 3.32's alltoall__ompi mirrors it): the table below; "linear-sync" (linear with a
# bound on the requests in flight) and "two-procs" (two ranks' exchange) are simulated as
# "linear" and "pairwise".
OPENMPI_41_ALLTOALL = (
    (3, ((2, "pairwise"), (4, "two-procs"), (16, "pairwise"), (64, "two-procs"),
         (256, "pairwise"), (4096, "two-procs"), (32768, "pairwise"), (262144, "linear-sync"),
         (1048576, "two-procs"), (math.inf, "pairwise"))),
    (8, ((8192, "linear-sync"), (16384, "linear"), (65536, "linear-sync"), (524288, "linear"),
         (1048576, "pairwise"), (math.inf, "linear"))),
    (16, ((262144, "linear-sync"), (math.inf, "linear"))),
    (32, ((4, "linear-sync"), (512, "bruck"), (8192, "linear-sync"), (32768, "linear"),
          (262144, "linear-sync"), (524288, "linear"), (math.inf, "linear-sync"))),
    (64, ((512, "bruck"), (524288, "linear"), (math.inf, "linear-sync"))),
    (128, ((1024, "bruck"), (2048, "linear"), (4096, "linear-sync"), (262144, "linear"),
           (math.inf, "pairwise"))),
    (256, ((1024, "bruck"), (2048, "linear-sync"), (262144, "linear"), (math.inf, "pairwise"))),
    (512, ((1024, "bruck"), (8192, "linear-sync"), (32768, "linear"), (math.inf, "pairwise"))),
    (1024, ((512, "bruck"), (8192, "linear-sync"), (16384, "linear"), (131072, "linear-sync"),
            (262144, "linear"), (math.inf, "pairwise"))),
    (2048, ((512, "bruck"), (1024, "linear-sync"), (2048, "linear"), (16384, "linear-sync"),
            (262144, "linear"), (math.inf, "linear-sync"))),
    (4096, ((1024, "bruck"), (4096, "linear-sync"), (8192, "linear"), (131072, "linear-sync"),
            (math.inf, "linear"))),
    (math.inf, ((2048, "bruck"), (8192, "linear-sync"), (16384, "linear"),
                (32768, "linear-sync"), (65536, "linear"), (math.inf, "linear-sync"))),
)  # fmt: skip
ALLTOALL_PROGRAM = {"linear-sync": "linear", "two-procs": "pairwise"}  # Open MPI's -> ours


def alltoall_algorithm(library, block_bytes, size):
    """The alltoall program (``pairwise``, ``linear``, ``bruck``; `block_collectives.ALLTOALLS`)
    ``library`` runs for blocks of ``block_bytes`` on ``size`` ranks.

    >>> [alltoall_algorithm("mpich", n, 64) for n in (256, 257, 32768, 32769)]
    ['bruck', 'linear', 'linear', 'pairwise']
    >>> [alltoall_algorithm("openmpi", n, 64) for n in (199, 200, 3000)]
    ['bruck', 'linear', 'pairwise']
    >>> [alltoall_algorithm("openmpi-4.1", n, 64) for n in (1023, 1024, 262143, 262144)]
    ['bruck', 'linear', 'linear', 'pairwise']
    """
    _check(library)
    if size < 2:
        return "pairwise"
    if library == "mpich":
        if block_bytes <= 256 and size >= 8:
            return "bruck"
        return "linear" if block_bytes <= 32768 else "pairwise"
    if library == "openmpi":
        if size == 2:
            return "pairwise"  # two_procs
        if block_bytes < 200 and size > 12:
            return "bruck"
        return "linear" if block_bytes < 3000 else "pairwise"
    chosen = _look_up(OPENMPI_41_ALLTOALL, size, block_bytes)
    return ALLTOALL_PROGRAM.get(chosen, chosen)


# Allgather, by the bytes of one rank's block. MPICH's MPIR_Allgather_intra_auto: recursive
# doubling on a power of two ranks below MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE (524288 bytes in
# all), Bruck's below MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE (81920 in all), else the ring. Open MPI
# 4.0 (v4.0.x ompi_coll_tuned_allgather_intra_dec_fixed): below 50,000 bytes in all recursive
# doubling (a power of two) or Bruck's, else neighbour exchange (even) or the ring (odd). Open
# MPI 4.1 (v4.1.x, as SimGrid 3.32's allgather__ompi mirrors it): the table below, with Open
# MPI's fall-backs (recursive doubling to Bruck's off a power of two, neighbour exchange to the
# ring on an odd count); "two-procs" on 2 ranks is one exchange, the ring's.
OPENMPI_41_ALLGATHER = (
    (3, ((math.inf, "two-procs"),)),
    (32, ((math.inf, "recursive-doubling"),)),
    (64, ((1024, "recursive-doubling"), (65536, "neighbor-exchange"), (math.inf, "ring"))),
    (128, ((512, "recursive-doubling"), (65536, "neighbor-exchange"), (math.inf, "ring"))),
    (256, ((512, "recursive-doubling"), (131072, "neighbor-exchange"), (524288, "ring"),
           (1048576, "neighbor-exchange"), (math.inf, "ring"))),
    (512, ((32, "recursive-doubling"), (128, "bruck"), (1024, "recursive-doubling"),
           (131072, "neighbor-exchange"), (524288, "ring"), (1048576, "neighbor-exchange"),
           (math.inf, "ring"))),
    (1024, ((64, "recursive-doubling"), (256, "bruck"), (2048, "recursive-doubling"),
            (math.inf, "neighbor-exchange"))),
    (2048, ((4, "recursive-doubling"), (8, "bruck"), (16, "recursive-doubling"), (32, "bruck"),
            (256, "recursive-doubling"), (512, "bruck"), (4096, "recursive-doubling"),
            (math.inf, "neighbor-exchange"))),
    (4096, ((32, "bruck"), (128, "recursive-doubling"), (512, "bruck"),
            (4096, "recursive-doubling"), (math.inf, "neighbor-exchange"))),
    (math.inf, ((2, "recursive-doubling"), (8, "bruck"), (16, "recursive-doubling"),
                (512, "bruck"), (4096, "recursive-doubling"), (math.inf, "neighbor-exchange"))),
)  # fmt: skip


def allgather_algorithm(library, block_bytes, size):
    """The allgather program (``ring``, ``recursive-doubling``, ``bruck``,
    ``neighbor-exchange``; `block_collectives.ALLGATHERS`) ``library`` runs for blocks of
    ``block_bytes`` a rank on ``size`` ranks.

    >>> [allgather_algorithm("mpich", n, 64) for n in (8191, 8192)]
    ['recursive-doubling', 'ring']
    >>> [allgather_algorithm("mpich", n, 60) for n in (1365, 1366)]
    ['bruck', 'ring']
    >>> [allgather_algorithm("openmpi", n, 64) for n in (781, 782)]
    ['recursive-doubling', 'neighbor-exchange']
    >>> [allgather_algorithm("openmpi-4.1", n, 64) for n in (511, 65535, 65536)]
    ['recursive-doubling', 'neighbor-exchange', 'ring']
    """
    _check(library)
    total, power_of_two = block_bytes * size, size & (size - 1) == 0
    if size < 2:
        return "ring"
    if library == "mpich":
        if total < 524288 and power_of_two:
            return "recursive-doubling"
        return "bruck" if total < 81920 else "ring"
    if library == "openmpi":
        if size == 2:
            return "ring"  # two_procs: one exchange
        if total < 50000:
            return "recursive-doubling" if power_of_two else "bruck"
        return "ring" if size % 2 else "neighbor-exchange"
    chosen = _look_up(OPENMPI_41_ALLGATHER, size, block_bytes)
    if chosen == "two-procs" or (chosen == "neighbor-exchange" and size % 2):
        return "ring"
    if chosen == "recursive-doubling" and not power_of_two:
        return "bruck"
    return chosen


# Broadcast. MPICH 4+'s built-in selection (MPICH 3's MPIR_Bcast_intra_auto and its CVARs:
# short 12288, long 524288, min procs 8; the JSON's bounds are inclusive): a binomial tree on
# fewer than 8 ranks or up to 12,288 bytes, else a scatter and a recursive-doubling allgather up
# to 524,288 bytes on a power of two ranks, else a scatter and a ring allgather. Open MPI 4.0
# (v4.0.x ompi_coll_tuned_bcast_intra_dec_fixed, "based on MX results for messages up to 36MB
# and communicator sizes up to 64 nodes"): a binomial tree below 2,048 bytes or for one
# element, the split binary tree in 1 KiB segments below 370,728 bytes, then by the fitted lines
# below: the pipeline in 128 KiB segments, the split binary tree in 8 KiB segments on fewer than
# 13 ranks, the pipeline in 64, 16 or 8 KiB.
MPICH_BCAST_SHORT, MPICH_BCAST_LONG, MPICH_BCAST_MIN_PROCS = 12288, 524288, 8
OPENMPI_BCAST_SMALL, OPENMPI_BCAST_INTERMEDIATE = 2048, 370728
OPENMPI_BCAST_LINES = (  # (a [1/byte], b, segment bytes): the pipeline's while size < a n + b
    (1.6134e-6, 2.1102, 128 * 1024),
    (2.3679e-6, 1.1787, 64 * 1024),
    (3.2118e-6, 8.7936, 16 * 1024),
)

# Open MPI 4.1's broadcast (v4.1.x ompi_coll_tuned_bcast_intra_dec_fixed; SimGrid 3.32's
# bcast__ompi has the same table), read as the allreduce's; 4.1 passes no segment size (0: the
# whole message, or each half, in one). Its "chain" of fan-out 0 is forced to 1 by Open MPI, and
# with no segments it and the "pipeline" are one message down the chain; "binomial" is Open
# MPI's own tree ("bmtree"), "knomial" of radix 4 (the tuned default); "scatter_allgather" is
# a binomial scatter then recursive doubling (MPICH's where the ranks are a power of two; Open
# MPI's own variant for other counts is not written here: the ring allgather stands in),
# "scatter_allgather_ring" the ring.
OPENMPI_41_BCAST = (
    (4, ((32, "pipeline"), (256, "binary"), (512, "pipeline"), (1024, "knomial"),
         (32768, "linear"), (131072, "binary"), (262144, "pipeline"), (524288, "linear"),
         (1048576, "bmtree"), (math.inf, "binary"))),
    (8, ((64, "binary"), (128, "bmtree"), (2048, "binary"), (8192, "bmtree"),
         (1048576, "linear"), (math.inf, "pipeline"))),
    (16, ((8, "knomial"), (64, "binary"), (4096, "knomial"), (16384, "binary"),
          (32768, "bmtree"), (math.inf, "linear"))),
    (32, ((4096, "knomial"), (1048576, "bmtree"), (math.inf, "scatter-allgather"))),
    (64, ((2048, "bmtree"), (math.inf, "knomial"))),
    (128, ((math.inf, "knomial"),)),
    (256, ((2, "bmtree"), (16384, "binary"), (32768, "linear"), (65536, "binary"),
           (math.inf, "knomial"))),
    (1024, ((16384, "knomial"), (32768, "split-binary"), (math.inf, "knomial"))),
    (2048, ((524288, "knomial"), (math.inf, "scatter-allgather"))),
    (4096, ((262144, "knomial"), (math.inf, "scatter-allgather"))),
    (math.inf, ((8192, "knomial"), (16384, "binary"), (262144, "knomial"),
                (math.inf, "scatter-allgather"))),
)  # fmt: skip


def bcast_algorithm(library, nbytes, size, count=None):
    """(program, segment bytes) of the broadcast ``library`` runs for ``nbytes`` (``count``
    elements, default one a byte) on ``size`` ranks: ``binomial``, ``scatter-recursive-
    doubling`` or ``scatter-ring`` (MPICH; `programs.broadcasts.BCASTS`), ``split-binary`` or
    ``pipeline`` with their segments (Open MPI 4.0); segment 0 where there are none. Open MPI
    4.1: `OPENMPI_41_BCAST`, no segments (``linear``, ``pipeline``, ``split-binary``,
    ``binary``, ``bmtree``, ``knomial``, ``scatter-recursive-doubling``, ``scatter-ring``).

    >>> [bcast_algorithm("mpich", n, 8)[0] for n in (12288, 12289, 524289)]
    ['binomial', 'scatter-recursive-doubling', 'scatter-ring']
    >>> bcast_algorithm("mpich", 1 << 20, 9), bcast_algorithm("mpich", 1 << 20, 7)
    (('scatter-ring', 0), ('binomial', 0))
    >>> [bcast_algorithm("openmpi", n, 64) for n in (2047, 2048, 370728)]
    [('binomial', 0), ('split-binary', 1024), ('pipeline', 8192)]
    >>> [bcast_algorithm("openmpi", 10**6, p) for p in (2, 8)]
    [('pipeline', 131072), ('split-binary', 8192)]
    >>> [bcast_algorithm("openmpi-4.1", n, 64)[0] for n in (4, 65536)]
    ['knomial', 'knomial']
    >>> [bcast_algorithm("openmpi-4.1", 1 << 20, p)[0] for p in (3, 6, 16, 24)]
    ['binary', 'pipeline', 'scatter-recursive-doubling', 'scatter-ring']
    """
    _check(library)
    if library == "openmpi-4.1":
        name = _look_up(OPENMPI_41_BCAST, size, nbytes)
        if name == "scatter-allgather":
            name = "scatter-ring" if size & (size - 1) else "scatter-recursive-doubling"
        return name, 0
    count = nbytes if count is None else count
    if library == "mpich":
        if nbytes <= MPICH_BCAST_SHORT or size < MPICH_BCAST_MIN_PROCS:
            return "binomial", 0
        if nbytes <= MPICH_BCAST_LONG and size & (size - 1) == 0:
            return "scatter-recursive-doubling", 0
        return "scatter-ring", 0
    if nbytes < OPENMPI_BCAST_SMALL or count <= 1:
        return "binomial", 0
    if nbytes < OPENMPI_BCAST_INTERMEDIATE:
        return "split-binary", 1024
    a, b, segment = OPENMPI_BCAST_LINES[0]
    if size < a * nbytes + b:
        return "pipeline", segment
    if size < 13:
        return "split-binary", 8192
    for a, b, segment in OPENMPI_BCAST_LINES[1:]:
        if size < a * nbytes + b:
            return "pipeline", segment
    return "pipeline", 8192


MPICH_REDUCE_SHORT = 2048  # MPICH 4/5 JSON: binomial for avg_msg_size<=2048 (inclusive)


# Open MPI 4.1's reduce for commutative operations (v4.1.x ompi_coll_tuned_reduce_intra_dec_fixed,
# as SimGrid mirrors it in reduce__ompi), read as the allreduce's table; 4.1 passes no segment
# size (0: the whole buffer at once), so its chain (fan-out 0, forced to 1) is the pipeline.
# "rabenseifner" is the reduce-scatter and gather (ompi_coll_base_reduce_intra_redscat_gather),
# linear below p' elements as its code falls back.
OPENMPI_41_REDUCE = (
    (4, ((8, "rabenseifner"), (16, "binary"), (32, "pipeline"), (262144, "linear"),
         (524288, "pipeline"), (1048576, "chain"), (math.inf, "pipeline"))),
    (8, ((4096, "binary"), (65536, "chain"), (262144, "in-order-binomial"),
         (524288, "linear"), (1048576, "in-order-binomial"), (math.inf, "linear"))),
    (16, ((8192, "binary"), (math.inf, "in-order-binomial"))),
    (32, ((4096, "binary"), (math.inf, "in-order-binomial"))),
    (256, ((math.inf, "in-order-binomial"),)),
    (512, ((8192, "in-order-binomial"), (16384, "in-order-binary"),
           (math.inf, "in-order-binomial"))),
    (2048, ((math.inf, "in-order-binomial"),)),
    (4096, ((512, "in-order-binomial"), (1024, "in-order-binary"), (8192, "in-order-binomial"),
            (16384, "in-order-binary"), (math.inf, "in-order-binomial"))),
    (math.inf, ((16, "in-order-binomial"), (32, "in-order-binary"), (1024, "in-order-binomial"),
                (2048, "in-order-binary"), (8192, "in-order-binomial"),
                (16384, "in-order-binary"), (math.inf, "in-order-binomial"))),
)  # fmt: skip

# Open MPI 4.0's reduce for commutative operations (v4.0.x ompi_coll_tuned_reduce_intra_dec_fixed;
# SimGrid's reduce__ompi mirrors it): lines size = a n + b (a in 1/byte) past which a rule holds
OPENMPI_REDUCE_LINES = (  # (a, b, program, segment bytes), tried in turn: size > a n + b
    (0.6016 / 1024, 1.3496, "in-order-binomial", 1024),
    (0.0410 / 1024, 9.7128, "pipeline", 1024),
    (0.0422 / 1024, 1.1614, "binary", 32 * 1024),
    (0.0033 / 1024, 1.6761, "pipeline", 32 * 1024),
)


def reduce_algorithm(library, count, itemsize, size):
    """(program, segment bytes) of the reduce (`programs.reductions.REDUCES`) ``library`` runs
    for ``count`` elements of ``itemsize`` bytes to one root of ``size`` ranks (a built-in,
    commutative op); segment 0 where there are none. MPICH 4 and 5's built-in selection:
    ``binomial`` up to 2,048 bytes or with fewer elements than the largest power of two <=
    size, else ``reduce-scatter-gather``. Open MPI 4.0: ``linear`` below 8 ranks and 512 bytes;
    the ``in-order-binomial`` tree unsegmented below 8 ranks and 20,480 bytes, below 2,048
    bytes or for one element; else the first of `OPENMPI_REDUCE_LINES` whose line the size
    passes, else the ``pipeline`` of 64 KiB segments. Open MPI 4.1: `OPENMPI_41_REDUCE`, no
    segments.

    >>> [reduce_algorithm("mpich", n, 4, 8)[0] for n in (512, 513)]
    ['binomial', 'reduce-scatter-gather']
    >>> [reduce_algorithm("openmpi", n, 4, 4) for n in (127, 128, 5120)]
    [('linear', 0), ('in-order-binomial', 0), ('binary', 32768)]
    >>> [reduce_algorithm("openmpi", n, 4, 64)[0] for n in (511, 512, 10**5, 350_000)]
    ['in-order-binomial', 'in-order-binomial', 'pipeline', 'binary']
    >>> [reduce_algorithm("openmpi", n, 4, 64)[1] for n in (512, 10**5, 10**6, 10**7)]
    [1024, 1024, 32768, 65536]
    >>> [reduce_algorithm("openmpi-4.1", n, 4, 64) for n in (10**6,)]
    [('in-order-binomial', 0)]
    """
    _check(library)
    nbytes = count * itemsize
    pof2 = 1 << (size.bit_length() - 1)
    if library == "mpich":
        if nbytes <= MPICH_REDUCE_SHORT or count < pof2:
            return "binomial", 0
        return "reduce-scatter-gather", 0
    if library == "openmpi-4.1":
        chosen = _look_up(OPENMPI_41_REDUCE, size, nbytes)
        if chosen == "rabenseifner":
            return ("reduce-scatter-gather" if count >= pof2 else "linear"), 0
        return PROGRAM.get(chosen, chosen), 0
    if size < 8 and nbytes < 512:
        return "linear", 0
    if (size < 8 and nbytes < 20480) or nbytes < 2048 or count <= 1:
        return "in-order-binomial", 0
    for a, b, program, segment_bytes in OPENMPI_REDUCE_LINES:
        if size > a * nbytes + b:
            return program, segment_bytes
    return "pipeline", 64 * 1024


def library_for(version):
    """The `LIBRARIES` name of the MPI library ``version`` names (the first line of
    ``MPI_Get_library_version``): Open MPI before 4.1 ``openmpi`` (the fixed rules of 1.x to
    4.0 are one set), 4.1 and later ``openmpi-4.1`` (the rules 4.1 brought; whether a later
    release changed them is not checked here); anything else ``mpich``, whose choices
    MPICH-derived libraries (Intel MPI, MVAPICH, Cray MPICH) keep.

    >>> library_for("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4")
    'openmpi-4.1'
    >>> library_for("Open MPI v4.0.3, package: Open MPI spack"), library_for("MPICH Version: 4.2.1")
    ('openmpi', 'mpich')
    """
    found = re.search(r"Open MPI v?(\d+)\.(\d+)", version)
    if found is None:
        return "mpich"
    return "openmpi" if (int(found[1]), int(found[2])) < (4, 1) else "openmpi-4.1"


def _look_up(table, size, nbytes):
    """The algorithm an Open MPI 4.1 ``table`` names for ``size`` ranks and ``nbytes``: the
    first row whose rank bound ``size`` is under, then its first byte bound ``nbytes`` is under
    (both exclusive, as the source's ``<``)."""
    rules = next(rules for ranks, rules in table if size < ranks)
    return next(algorithm for bound, algorithm in rules if nbytes < bound)


def _check(library):
    if library not in LIBRARIES:
        raise ValueError(f"--mpi must be one of {', '.join(LIBRARIES)}, got {library!r}")
