"""The real backend: carry out a node program's operations, timed on the wall clock.

Theory of operation: the driver loop sends each reply into the program and gets its next operation
back (``op = program.send(reply)``), the SimPy way, and hands the operation to its handler: Compute
runs the kernel, Send/Recv/SendRecv/Allreduce are one MPI call each (the ring allreduce is the
`programs.collectives.ring_allreduce` generator driven over ``Sendrecv``), Evaluate is collective
and kept off the training clock.

Every second of the process falls into exactly one bucket, and ``self.mark`` is where the uncharged
interval starts: the program's own code between two yields (its local math, e.g. the optimizer
update) is compute; a Compute operation is compute; waiting for a peer is wait; moving bytes is
comm; an evaluation is evaluation. Wait is told from comm by a timed entry (``--measure-wait``): a
barrier before each collective, a probe before each receive. Step boundaries arrive through the
node's ``on_step_end`` hook, called from inside the program, so the seconds charged to the steps add
up to the training clock (wall time since the start minus evaluation time) exactly.
"""

import os
import signal
import time
from time import perf_counter

import numpy as np

from twinsgd.programs.collectives import (
    ALLREDUCES,
    allreduce_bytes,
    evaluate_for_log,
    finish_reduction,
    ring_allreduce,
)
from twinsgd.programs.compression.wire import from_wire, size_varies, to_wire
from twinsgd.programs.ops import (
    ANY_SOURCE,
    Allgather,
    Allreduce,
    Compute,
    Evaluate,
    Exchange,
    Recv,
    Send,
    SendRecv,
)
from twinsgd.run.faults import InjectedFault
from twinsgd.run.runlog import MIN_LOCAL_EVENT_S, READ_WIRE, WRITE_WIRE

TOKEN_TAG = 1000  # tag offset of the empty messages that time an exchange's entry


def exchange_arrays(comm, payloads, bufs, tag):
    """Irecv ``bufs[p]`` from and Isend ``payloads[p]`` to every peer p, then wait for all (an
    `Exchange` of arrays: no order of the peers can block); returns ``{p: bufs[p]}``."""
    peers = list(payloads)
    requests = [comm.Irecv(bufs[p], source=p, tag=tag) for p in peers]
    requests += [comm.Isend(payloads[p], dest=p, tag=tag) for p in peers]
    if requests:
        requests[0].Waitall(requests)  # a class method of mpi4py's Request
    return {p: bufs[p] for p in peers}


def probe(comm, source, tag, status):
    """Wait until a message from ``source`` with ``tag`` can be received (MPI's Probe; its
    envelope in ``status``), yielding the core between polls.

    Why not ``comm.Probe``: MPICH 5's Probe polls without yielding, so where ranks share cores
    a rank waiting in it keeps its core until the scheduler's turn ends (4 ms here) while a rank
    of the same core whose message has come waits; its Recv and Send yield at once. Measured
    2026-11-27 (2 cores, 4 ranks two to a core, a server sending 670 KB to 3 workers in turn):
    two ranks of one core both in Probe, a message sat 3.4 ms before its receiver saw it; the
    exchange took 6.2 ms an iteration with Probe before each Recv and 3.6 ms without. With a
    core each, the loop costs about a microsecond more than Probe."""
    while not comm.Iprobe(source=source, tag=tag, status=status):
        os.sched_yield()


def trace_marker():
    """With ``TWINSGD_TRACE_MARKS=1`` (set by `twinsgd.analysis.schedtrace`), tracefs's
    ``trace_marker`` opened for writing: each rank marks the kernel's trace as a Compute begins
    and ends; else (or where it cannot be opened) None. On an emulated host, whose ``ip netns
    exec`` mounts a /sys without tracefs, `real.cluster` opens it before and passes it on
    (``TWINSGD_TRACE_MARKS_FD``)."""
    if os.environ.get("TWINSGD_TRACE_MARKS") != "1":
        return None
    if "TWINSGD_TRACE_MARKS_FD" in os.environ:
        return int(os.environ["TWINSGD_TRACE_MARKS_FD"])
    try:
        return os.open("/sys/kernel/tracing/trace_marker", os.O_WRONLY)
    except OSError:
        return None


def receive_bytes(comm, MPI, source, tag, status):
    """Receive one message of unknown size as bytes (a compressed message's wire bytes): probe
    for its size, then receive it; the status names the sender. Returns a uint8 array."""
    probe(comm, source, tag, status)
    wire = np.empty(status.Get_count(MPI.BYTE), np.uint8)
    comm.Recv(wire, source=status.Get_source(), tag=tag, status=status)
    return wire


def exchange_bytes(comm, MPI, wires, tag):
    """An `Exchange` of compressed messages' wire bytes ``{peer: uint8 array}``: Isend each
    peer its bytes, receive each peer's (sizes vary, so each is probed first), then wait for
    the sends; returns ``{peer: uint8 array}``."""
    requests = [comm.Isend(wire, dest=p, tag=tag) for p, wire in wires.items()]
    status = MPI.Status()
    got = {p: receive_bytes(comm, MPI, p, tag, status) for p in wires}
    if requests:
        requests[0].Waitall(requests)
    return got


def allgather_bytes(comm, wire, varies):
    """Every rank's wire bytes, in rank order (an `Allgather` of compressed messages): MPI's
    Allgather of them, or where sizes vary (``varies``, `size_varies`) an Allgather of the
    8-byte sizes, then an Allgatherv. Returns ``(blocks, sent, received)``: the other ranks'
    bytes (None at this rank), and the bytes as the simulator moves them: ``(p - 1) m`` each
    way for one size m (every algorithm the libraries pick moves that); with sizes, 8 bytes to
    and from each other rank, then around the ring, where a rank forwards every block but its
    right neighbour's and receives every block but its own.
    """
    # NOTE: plain Python lists, no numpy call but the buffers: right after a gradient each
    # numpy call on a small array runs cold (np.full, cumsum and tolist here took 30 us of a
    # 70 us call on 2 ranks, around an Allgather of 35 us; 2026-11-28), all of it charged as comm
    size, rank, n = comm.Get_size(), comm.Get_rank(), len(wire)
    if varies:
        counts = np.empty(size, np.int64)
        comm.Allgather(np.array([n], np.int64), counts)
        lengths = counts.tolist()
        total, sizes_bytes = sum(lengths), (size - 1) * counts.itemsize
        gathered = np.empty(total, np.uint8)
        comm.Allgatherv(wire, [gathered, counts])
        sent = sizes_bytes + total - lengths[(rank + 1) % size]
        received = sizes_bytes + total - n
    else:
        lengths = [n] * size
        gathered = np.empty(size * n, np.uint8)
        comm.Allgather(wire, gathered)
        sent = received = (size - 1) * n
    blocks, end = [], 0
    for r, count in enumerate(lengths):
        blocks.append(None if r == rank else gathered[end : end + count])
        end += count
    return blocks, sent, received


def run_collective_mpi(comm, program):
    """Carry out a collective generator of `programs.collectives` (Send, Recv, SendRecv, and an
    Exchange of arrays) with one blocking MPI call per operation (an Exchange: Irecv and Isend
    with each peer, then Waitall). Collective. Returns the bytes ``(sent, received)``."""
    reply, sent, received = None, 0, 0
    while True:
        try:
            op = program.send(reply)
        except StopIteration:
            return sent, received
        if isinstance(op, Exchange):
            reply = exchange_arrays(comm, op.payloads, op.bufs, op.tag)
            sent += sum(payload.nbytes for payload in op.payloads.values())
            received += sum(buf.nbytes for buf in reply.values())
        elif isinstance(op, SendRecv):
            comm.Sendrecv(
                op.payload,
                dest=op.dest,
                sendtag=op.tag,
                recvbuf=op.buf,
                source=op.source,
                recvtag=op.tag,
            )
            sent, received, reply = sent + op.payload.nbytes, received + op.buf.nbytes, op.buf
        elif isinstance(op, Send):
            comm.Send(op.payload, dest=op.dest, tag=op.tag)
            sent, reply = sent + op.payload.nbytes, None
        else:
            comm.Recv(op.buf, source=op.source, tag=op.tag)
            received, reply = received + op.buf.nbytes, (op.source, op.buf)


def ring_allreduce_mpi(comm, buf, rank, size):
    """Sum ``buf`` over ``comm`` in place with `ring_allreduce`, one ``Sendrecv`` per step.

    Collective. Returns the bytes ``(sent, received)`` by this rank.
    """
    return run_collective_mpi(comm, ring_allreduce(buf, rank, size))


class Driver:
    """Runs one node program in this process.

    Parameters
    ----------
    node : programs.node.Node
        The node the program runs on; its ``on_step_end`` hook is installed here.
    log : run.runlog.RunLog
        Receives seconds and bytes per step, evaluations, and (on rank 0) every rank's totals.
    comm : mpi4py.MPI.Comm or None
        The communicator of the run; None for one process without communication.
    measure_wait : bool
        Separate wait from comm with a barrier before each collective and a probe before each
        receive.
    on_step : callable or None
        Called with each finished `Step` (the progress bar).
    watchdog : real.watchdog.Watchdog or None
        Told the step and the operation before each operation (the heartbeat), and how long
        steps and evaluations take.
    faults : run.faults.FaultSchedule or None
        This run's fault schedule, acted out here: a kill is SIGKILL of this process, an
        exception `InjectedFault` raised out of the program, a slow fault idles this rank
        ``factor - 1`` times each Compute's duration after it (as a node running at
        1/factor of the speed would take longer; idle, so it takes no core from the others).
    clock_s : float
        Where this rank's training clock starts (a resumed run's: its checkpoint's time).
    clock_origin : float or None
        `time.perf_counter` of the run's common start on the clock this process reads, where
        every rank of the run reads the same one (ranks of one machine: ``CLOCK_MONOTONIC``):
        the timeline's events are laid on it (`timeline`). None: on this rank's own start.
    """

    def __init__(
        self,
        node,
        log,
        comm=None,
        measure_wait=True,
        on_step=None,
        watchdog=None,
        faults=None,
        clock_s=0.0,
        clock_origin=None,
    ):
        self.node, self.log, self.comm = node, log, comm
        self.rank, self.size = node.rank, node.size
        self.measure_wait, self.on_step = measure_wait, on_step
        self.watchdog = watchdog
        self.faults = faults if faults else None
        self._timed_faults = (
            sorted(
                (f for f in faults.for_rank(self.rank) if f.time_s is not None),
                key=lambda f: f.time_s,
            )
            if faults
            else []
        )
        self.step_no = node.start_iteration + 1  # the step in progress (this rank's own count)
        self._step_started = None
        self.events = []  # timeline: (name, kind, start_s, end_s) on this rank's clock
        self.eval_s = 0.0
        self._bsend_buffer = None
        self.mark = perf_counter()
        self.start = self.mark - clock_s  # a resumed run's clock goes on from its checkpoint's
        # how much later than the run's common start this rank started: its timeline's events
        # are that much later (ranks leave the starting barrier apart; past the cores, a turn)
        self._late_s = self.mark - clock_origin if clock_origin is not None else 0.0
        self._trace_marks = trace_marker()  # twinsgd.analysis.schedtrace's, or None
        node.on_step_end = self._end_step
        self._handlers = {
            Compute: self._compute,
            Evaluate: self._evaluate,
            Send: self._send,
            Recv: self._recv,
            SendRecv: self._sendrecv,
            Allreduce: self._allreduce,
            Exchange: self._exchange,
            Allgather: self._allgather,
        }
        if comm is not None:
            from real.mpi import MPI

            self.MPI = MPI

    def run(self, program):
        """Drive ``program`` to its end; return its return value."""
        reply, watchdog = None, self.watchdog
        self._step_started = perf_counter()
        self._strike(1)
        while True:
            try:
                op = program.send(reply)
            except StopIteration as stop:
                if self._bsend_buffer is not None:
                    self.MPI.Detach_buffer()  # waits until every buffered message has left
                return stop.value
            t0 = perf_counter()
            self._charge("compute", self.mark, t0, "local")
            handler = self._handlers.get(type(op))
            if handler is None:
                raise TypeError(f"real backend: no handler for operation {type(op).__name__}")
            if self._timed_faults and self.training_clock(t0) >= self._timed_faults[0].time_s:
                self._act(self._timed_faults.pop(0))
            if watchdog is not None:
                watchdog.enter(self.step_no, type(op).__name__.lower())
            reply = handler(op, t0)
            if watchdog is not None:
                watchdog.enter(self.step_no, "local")

    def training_clock(self, now):
        """Seconds of training at wall time ``now``: since the start, evaluations excluded."""
        return now - self.start - self.eval_s

    # -- accounting -------------------------------------------------------------------------------

    def _charge(self, kind, t0, t1, name, sent=0, received=0):
        self.log.charge(kind, t1 - t0, sent, received)
        if name != "local" or t1 - t0 > MIN_LOCAL_EVENT_S:
            self.events.append((name, kind, t0 - self.start, t1 - self.start))
        self.mark = t1

    def _end_step(self, step, loss, staleness):
        now = perf_counter()
        self._charge("compute", self.mark, now, "local")
        self.log.end_step(
            self.rank, step.epoch, step.iteration, self.training_clock(now), loss, staleness
        )
        self.node.checkpoint(step)
        if self.on_step is not None:
            self.on_step(step)
        if self.watchdog is not None:
            self.watchdog.took(now - self._step_started)
        self._step_started = now
        self.step_no = step.iteration + 1
        self._strike(self.step_no)

    # -- faults -----------------------------------------------------------------------------------

    def _strike(self, step):
        """Act out the kill or exception fault of this rank at the start of ``step``, if any."""
        fault = self.faults.failure_at(self.rank, step) if self.faults else None
        if fault is not None:
            self._act(fault)

    def _act(self, fault):
        if fault.kind == "kill":
            if self.watchdog is not None:
                self.watchdog.stop("killed", self.step_no)  # how the sentinel knows
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedFault(fault.describe())

    def _enter_collective(self, t0):
        """Time the wait for the slowest rank (a barrier) when measuring wait; return the time."""
        if not self.measure_wait or self.size == 1:
            return t0
        self.comm.Barrier()
        t1 = perf_counter()
        self._charge("wait", t0, t1, "wait")
        return t1

    # -- handlers: one per operation type; each returns the reply ------------------------------

    def _compute(self, op, t0):
        if self._trace_marks is not None:
            os.write(self._trace_marks, b"C+ %d" % self.rank)
        result = op.fn(*op.args)
        if self._trace_marks is not None:
            os.write(self._trace_marks, b"C- %d" % self.rank)
        factor = self.faults.slowdown(self.rank, self.step_no) if self.faults else 1.0
        if factor > 1.0:  # a slow fault: this rank runs at 1/factor of its speed
            time.sleep((factor - 1.0) * (perf_counter() - t0))
        self._charge("compute", t0, perf_counter(), "compute")
        return result

    def _send(self, op, t0):
        payload = data = op.payload
        if not isinstance(payload, np.ndarray):  # a compressed message: its wire bytes
            (data,), t0 = self._write_wire(t0, (payload,))
        if op.buffered:
            self._attach_for(data.nbytes)
            self.comm.Bsend(data, dest=op.dest, tag=op.tag)
        else:
            self.comm.Send(data, dest=op.dest, tag=op.tag)
        self._charge("comm", t0, perf_counter(), f"send to {op.dest}", sent=payload.nbytes)

    def _write_wire(self, t0, messages):
        """Compressed messages' wire bytes (`compression.wire`), written; the time charged as
        comm, its own timeline event (the calibration reads it). Returns (bytes, now)."""
        wires = [to_wire(message) for message in messages]
        t1 = perf_counter()
        self._charge("comm", t0, t1, WRITE_WIRE)
        return wires, t1

    def _read_wire(self, t0, wires):
        """Messages read from their wire bytes, as `_write_wire` times writing them. Returns
        (messages, now)."""
        messages = [from_wire(wire) for wire in wires]
        t1 = perf_counter()
        self._charge("comm", t0, t1, READ_WIRE)
        return messages, t1

    def _attach_for(self, nbytes):
        """Attach an MPI buffer holding two messages of ``nbytes`` per rank (for Bsend), once, or
        a larger one when a larger message comes (detaching waits for the pending ones)."""
        MPI = self.MPI
        needed = 2 * self.size * (nbytes + MPI.BSEND_OVERHEAD)
        if self._bsend_buffer is not None and len(self._bsend_buffer) >= needed:
            return
        if self._bsend_buffer is not None:
            MPI.Detach_buffer()
        self._bsend_buffer = bytearray(needed)
        MPI.Attach_buffer(self._bsend_buffer)

    def _recv(self, op, t0):
        MPI = self.MPI
        status = MPI.Status()
        source = MPI.ANY_SOURCE if op.source == ANY_SOURCE else op.source
        if self.measure_wait:
            probe(self.comm, source, op.tag, status)
            t0, source = self._charge_wait(t0), status.Get_source()
        if op.buf is not None:
            self.comm.Recv(op.buf, source=source, tag=op.tag, status=status)
            payload = op.buf
        else:
            payload = receive_bytes(self.comm, MPI, source, op.tag, status)
        source, now = status.Get_source(), perf_counter()
        self._charge("comm", t0, now, f"recv from {source}", received=payload.nbytes)
        if op.buf is None:  # a compressed message
            (payload,), _ = self._read_wire(now, (payload,))
        return source, payload

    def _charge_wait(self, t0):
        t1 = perf_counter()
        self._charge("wait", t0, t1, "wait")
        return t1

    def _sendrecv(self, op, t0):
        self.comm.Sendrecv(
            op.payload,
            dest=op.dest,
            sendtag=op.tag,
            recvbuf=op.buf,
            source=op.source,
            recvtag=op.tag,
        )
        self._charge(
            "comm", t0, perf_counter(), "sendrecv", sent=op.payload.nbytes, received=op.buf.nbytes
        )
        return op.buf

    def _exchange(self, op, t0):
        """Non-blocking sends and receives with every peer, completed together (Waitall).

        With wait measurement, an empty token exchanged with every peer first: the time until
        the last neighbour is there is wait, the data transfer after it comm.
        """
        MPI, comm, peers = self.MPI, self.comm, list(op.payloads)
        if self.measure_wait and peers:
            token = np.empty(0, np.uint8)
            tokens = {p: np.empty(0, np.uint8) for p in peers}
            exchange_arrays(comm, dict.fromkeys(peers, token), tokens, op.tag + TOKEN_TAG)
            t0 = self._charge_wait(t0)
        sent = sum(op.payloads[p].nbytes for p in peers)
        if all(op.bufs.get(p) is not None for p in peers):  # arrays, straight into the buffers
            got = exchange_arrays(comm, op.payloads, op.bufs, op.tag)
            received = sum(got[p].nbytes for p in peers)
            self._charge("comm", t0, perf_counter(), "exchange", sent, received)
            return got
        wires, t0 = self._write_wire(t0, [op.payloads[p] for p in peers])  # compressed messages
        got = exchange_bytes(comm, MPI, dict(zip(peers, wires, strict=True)), op.tag)
        received, now = sum(got[p].nbytes for p in peers), perf_counter()
        self._charge("comm", t0, now, "exchange", sent, received)
        messages, _ = self._read_wire(now, [got[p] for p in peers])
        return dict(zip(peers, messages, strict=True))

    def _allgather(self, op, t0):
        t0 = self._enter_collective(t0)
        if self.size == 1:
            self._charge("comm", t0, perf_counter(), "allgather")
            return [op.payload]
        (wire,), t0 = self._write_wire(t0, (op.payload,))
        blocks, sent, received = allgather_bytes(self.comm, wire, size_varies(op.payload))
        now = perf_counter()
        self._charge("comm", t0, now, "allgather", sent, received)
        others, _ = self._read_wire(now, [b for b in blocks if b is not None])
        others.insert(self.rank, op.payload)
        return others

    def _allreduce(self, op, t0):
        buf = op.buf
        t0 = self._enter_collective(t0)
        if self.size == 1:
            sent = received = 0
        elif op.algo == "mpi":
            self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
            # counted as the algorithm MPICH picks for this message sends (mpich_allreduce)
            sent, received = allreduce_bytes("mpi", buf.size, buf.itemsize, self.rank, self.size)
        else:
            sent, received = run_collective_mpi(
                self.comm, ALLREDUCES[op.algo](buf, self.rank, self.size)
            )
        finish_reduction(buf, op.op, self.size)
        self._charge("comm", t0, perf_counter(), f"allreduce {op.algo}", sent, received)
        return buf

    def _evaluate(self, op, t0):
        """Collective evaluation: the reporting rank evaluates (the average model if asked), every
        rank gets the result; or the reporter's own evaluation, when not collective.

        Also gathers every rank's totals to rank 0 for the summary. Its whole time, including this
        bookkeeping, is evaluation time, off the training clock.
        """
        comm, root, collective = self.comm, self.node.reporter, op.collective and self.size > 1
        models, losses, totals = [op.params], [op.train_loss], None
        if collective:
            if op.average:
                models = comm.gather(op.params, root=root)
            losses = comm.gather(op.train_loss, root=root)
            totals = comm.gather(self.log.node_totals(), root=root)
        result = None
        if self.rank == root:
            result, train_loss, consensus = evaluate_for_log(op.fn, models, losses, op.average)
            self.log.evaluation(
                op.epoch,
                op.iteration,
                self.training_clock(t0),
                train_loss,
                *result,
                eval_s=perf_counter() - t0,
                consensus_distance=consensus,
                node_totals=totals,
            )
        if collective:
            result = comm.bcast(result, root=root)
        t1 = perf_counter()
        self.eval_s += t1 - t0
        if self.watchdog is not None:
            self.watchdog.took(t1 - t0)
        self.events.append(("evaluate", "eval", t0 - self.start, t1 - self.start))
        self.mark = t1
        return result

    def timeline(self):
        """This rank's events: (name, kind, start s, end s) on the run's common clock where
        it has one (``clock_origin``), else on its own (`chrome_trace`)."""
        late = self._late_s
        if not late:
            return list(self.events)
        return [(name, kind, t0 + late, t1 + late) for name, kind, t0, t1 in self.events]
