"""Closed-form collectives (``--collectives closed-form``): one event per collective instead of
its messages, for scale.

Every node's buffer waits at the collective; the last one in runs the algorithm's arithmetic for
all at once (the same generators, additions and order as the message level, through
`programs.lockstep`, so the weights are the same bit for bit) and starts one timer of the
algorithm's alpha-beta-gamma time (`programs.collectives.alpha_beta_time`, Thakur, Rabenseifner
and Gropp 2005) that releases them all: O(p) work per collective for p nodes. Alpha and beta
are asked of the network model (`sim.network.RoutedNetwork.ring_link`: the slowest step of a
ring over the ranks in order, a calibrated profile's measured costs included), so the closed form
and the message level agree wherever the network has no contention.
"""

from twinsgd.programs.collectives import (
    ALLREDUCES,
    allreduce_bytes,
    alpha_beta_time,
    combined_s,
    finish_reduction,
)
from twinsgd.programs.ghost import GhostArray
from twinsgd.programs.lockstep import run_lockstep
from twinsgd.programs.mpi_choices import allreduce_algorithm
from twinsgd.programs.reductions import library_reduce_bcast


def simulated_allreduce(algorithm, buf, size, library="mpich"):
    """The allreduce program the simulator runs for ``--allreduce algorithm`` over ``buf``:
    ``mpi`` is what the MPI ``library`` picks for that message (`programs.mpi_choices`)."""
    if algorithm in ALLREDUCES:
        return algorithm
    return allreduce_algorithm(library, buf.size, buf.itemsize, size)


def allreduce_program(algorithm, buf, rank, size, library="mpich"):
    """``rank``'s node program of the allreduce `simulated_allreduce` names. Open MPI's own
    reduce and broadcast (``nonoverlapping``, picked by ``mpi`` alone) go through the library's
    reduce and broadcast decisions (`reductions.library_reduce_bcast`); ``reduce-bcast`` by
    name, and that pick's closed-form time, use binomial trees for both."""
    name = simulated_allreduce(algorithm, buf, size, library)
    if name == "reduce-bcast" and algorithm == "mpi" and library != "mpich":
        return library_reduce_bcast(buf, rank, size, library)
    return ALLREDUCES[name](buf, rank, size)


def mean_pass_s(op, nbytes, size, finish, gamma):
    """Seconds of turning an allreduce's sum of ``nbytes`` over ``size`` ranks into its mean
    (``op`` "mean"; else none): one pass over the buffer, as measured in situ (``finish``, a
    PiecewiseCost) or at ``gamma`` (`combined_s`) (the real backend's comm pays it too, on
    bytes half just received)."""
    if op != "mean" or size == 1:
        return 0.0
    if finish is not None:
        return float(finish.seconds(nbytes))
    return combined_s(gamma, nbytes)


def allreduce_seconds(algorithm, nbytes, itemsize, size, link, gamma, call_s=0.0, mean_s=0.0):
    """Seconds of one closed-form allreduce of ``nbytes`` over ``size`` ranks, ``algorithm``
    as `simulated_allreduce` names it, on the ``link`` (alpha s, beta B/s) its ring steps are
    priced at: ``call_s`` once (MPI's own call: its steps after the first that much under
    alpha), the alpha-beta-gamma time, then ``mean_s`` (`mean_pass_s`). Both engines price an
    allreduce here, so their times are the same floats."""
    alpha, beta = link
    return (
        call_s
        + alpha_beta_time(algorithm, nbytes, size, max(alpha - call_s, 0.0), beta, itemsize, gamma)
        + mean_s
    )


def priced_allreduce_s(algo, buf, size, mpi, link, gamma, library_gamma, call_s, mean_s):
    """`allreduce_seconds` of an ``Allreduce(buf, algo=algo)`` over ``size`` ranks: MPI's own
    (``algo == "mpi"``, the algorithm ``mpi``'s library picks) is one call of the library, so its
    adds are at ``library_gamma`` (in C) and its ``call_s`` is paid once; our own algorithms add
    at ``gamma`` and have no call. The closed form and the analytic engine both price here."""
    library = algo == "mpi"
    return allreduce_seconds(
        simulated_allreduce(algo, buf, size, mpi),
        buf.nbytes,
        buf.itemsize,
        size,
        link,
        library_gamma if library else gamma,
        call_s if library and size > 1 else 0.0,
        mean_s,
    )


class ClosedFormAllreduce:
    """The simulator's handler of `Allreduce` in closed form: ``handler(node, op)`` is a SimPy
    generator that returns the reduced buffer.

    ``env``: the clock; ``network``: the `RoutedNetwork` whose ring link prices a step; ``logs``:
    each rank's RunLog (a node's wait is from its arrival to the last one's, its comm the
    algorithm's time); ``mpi``: the library whose choice ``--allreduce mpi`` runs; ``gamma``:
    seconds a byte combined; ``finishing(op, size)``: seconds of the mean's pass after it;
    ``call_s``: what a step inside MPI's own allreduce saves against the measured alpha: its
    steps after the first are that much under alpha (`Simulator`'s ``call_overhead_s``);
    ``library_gamma``: the same as ``gamma`` inside MPI's own allreduce (its adds in C; default
    ``gamma``).
    """

    def __init__(self, env, network, logs, mpi, gamma, finishing, call_s=0.0, library_gamma=None):
        self.env, self.network, self.logs = env, network, logs
        self.mpi, self.gamma, self.finishing = mpi, gamma, finishing
        self.library_gamma = gamma if library_gamma is None else library_gamma
        self.call_s = call_s
        self._calls = [0] * len(logs)  # collectives entered per node, to match them up
        self._pending = {}  # collectives in progress: number -> (bufs, done)
        self._bytes = {}  # (algorithm, n, itemsize, size) -> [(sent, received)] by rank
        self._links = {}  # (nbytes, pattern) -> (alpha, beta), worked out once
        self._seconds = {}  # (algo, op, nbytes, itemsize, size) -> its time, worked out once

    def __call__(self, node, op, entered=None):
        """``entered``: when the node reached the collective, if later than now (a compute
        whose time the driver has not yet spent, `Simulator._drive`); else now."""
        yield self.enter(node, op, self.env.now if entered is None else entered)
        return self.reduced(op, node.size)

    def enter(self, node, op, entered):
        """Put ``node``'s buffer into its next collective, which it reached at ``entered``; the
        event to wait on, after which `reduced` is its result. The driver calls the two itself
        where it can (no generator a node and step: `Simulator._drive`)."""
        env, rank, size = self.env, node.rank, node.size
        calls = self._calls
        calls[rank] = key = calls[rank] + 1
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = ([], [], [None] * size, env.event())
        ranks, arrivals, bufs, done = pending  # ranks and arrivals in the order they came
        ranks.append(rank)
        arrivals.append(entered)
        bufs[rank] = op.buf
        if len(ranks) == size:
            del self._pending[key]
            seconds, by_rank = self._run(op, bufs, size)
            last, now = max(arrivals), env.now
            ends = env.timeout(seconds if last == now else last + seconds - now)
            ends.callbacks.append(
                lambda _: self._release(done, ranks, arrivals, seconds, by_rank, last != now)
            )
        return done

    @staticmethod
    def reduced(op, size):
        """The reduced buffer a node gets back from ``op`` over ``size`` ranks."""
        return op.buf if type(op.buf) is GhostArray else finish_reduction(op.buf, op.op, size)

    def _release(self, done, ranks, arrivals, seconds, bytes_by_rank, reorder):
        """Charge every node its wait (from its arrival to the last one's) and the algorithm's
        ``seconds`` and bytes, all at once, then wake them: in the order they reached the
        collective if ``reorder`` (the last to arrive was a node whose compute the driver had
        not yet spent), else in the order they waited."""
        now, logs = self.env.now, self.logs
        for rank, entered in zip(ranks, arrivals, strict=True):
            waited = now - seconds - entered  # rounding may leave -1e-17 where 0
            logs[rank].charge_collective(
                waited if waited > 0.0 else 0.0, seconds, *bytes_by_rank[rank]
            )
        if reorder:
            order = sorted(range(len(arrivals)), key=arrivals.__getitem__)
            done.callbacks[:] = [done.callbacks[i] for i in order]
        done.succeed()

    def _run(self, op, bufs, size):
        """Add every rank's buffer (``bufs[rank]``) as the algorithm does; return (its
        seconds, every rank's (sent, received) bytes)."""
        if not isinstance(op.buf, GhostArray):  # a ghost has nothing to add
            run_lockstep(
                [
                    allreduce_program(op.algo, buf, rank, size, self.mpi)
                    for rank, buf in enumerate(bufs)
                ],
                buffered=True,
            )
        nbytes, itemsize = op.buf.nbytes, op.buf.itemsize
        key = (op.algo, op.op, nbytes, itemsize, size)  # (Rabenseifner's: O(p log p) to work out)
        seconds = self._seconds.get(key)
        if seconds is None:
            later = self._later_pattern(op.algo, size)
            seconds = self._seconds[key] = priced_allreduce_s(
                op.algo,
                op.buf,
                size,
                self.mpi,
                self._link(nbytes, size, later),
                self.gamma,
                self.library_gamma,
                self.call_s,
                self.finishing(op, size),
            ) + self._first_step_more_s(nbytes, size, later)
        return seconds, self._bytes_by_rank(op.algo, op.buf.size, itemsize, size)

    def _bytes_by_rank(self, algorithm, n, itemsize, size):
        """Every rank's (sent, received) bytes in one allreduce, worked out once per shape."""
        key = (algorithm, n, itemsize, size)
        table = self._bytes.get(key)
        if table is None:
            table = self._bytes[key] = [
                allreduce_bytes(algorithm, n, itemsize, rank, size) for rank in range(size)
            ]
        return table

    def _later_pattern(self, algo, size):
        """The measured pattern our own algorithm's steps after the first are priced at, as
        the message level prices them (`Simulator._collective`): a step right after another,
        sending bytes just written (``sendrecv-written``), where the network has it; else
        every step's (and MPI's own call's: one call, its steps priced as measured for it)."""
        if algo != "mpi" and size > 1 and "sendrecv-written" in self.network.costs:
            return "sendrecv-written"
        return "sendrecv"

    def _first_step_more_s(self, nbytes, size, later):
        """What the first step of an allreduce of ``nbytes`` over ``size`` ranks costs more
        than the ``later`` pattern's steps, at the ring's chunk (as every step is priced here,
        `_link`): exact for the ring, in the closed form's approximation for the others."""
        if later == "sendrecv":
            return 0.0
        chunk = nbytes / size
        (alpha, beta), (later_alpha, later_beta) = (
            self._link(nbytes, size),
            self._link(nbytes, size, later),
        )
        return (alpha + chunk / beta) - (later_alpha + chunk / later_beta)

    def _link(self, nbytes, size, pattern="sendrecv"):
        """The (alpha s, beta B/s) charged an allreduce of ``nbytes`` over ``size`` ranks: the
        slowest step of a ring over the ranks in order for its chunks
        (`RoutedNetwork.ring_link`) at the measured ``pattern``, worked out once per size."""
        link = self._links.get((nbytes, pattern))
        if link is None:
            link = self._links[nbytes, pattern] = self.network.ring_link(nbytes / size, pattern)
        return link
