"""Who is where: every rank's heartbeat in the run folder, and a watchdog on blocking operations.

A rank blocked in an MPI call cannot tell whether its peer is slow, dead or stuck. Each rank
therefore states, before every operation, which step it is in and what it is doing, in its own
24-byte record of ``RUN/.heartbeat`` (no locking: a record has one writer). The run folder is
shared by every rank already (they all append to steps.csv), so any rank, and the sentinel
(`real.sentinel`), can read where everyone is.

The record is written through a shared memory map of the file, a store rather than a system
call: a beat comes twice per operation, and a system call right after a gradient, its caches
cold, took 12-20 us here (a ``pwrite`` 0.6 us warm), which the real run's own code then paid
and the simulated one did not (2026-11-27). The kernel's page cache holds the map's stores, so
readers see them at once and a rank that dies leaves its last record behind.

The watchdog is a daemon thread per rank. When the rank has been blocked in one operation
longer than its timeout (``--watchdog``: by default ``max(60 s, 10 x`` the longest step or
evaluation so far), it reads the heartbeats, names the ranks that did not arrive (behind in
steps, or not in a blocking operation), marks the run failed, prints one line (the lowest
blocked rank only) and aborts the job with exit status 3.
"""

import math
import mmap
import os
import struct
import threading
import time
from pathlib import Path

RECORD = struct.Struct("<qqd")  # step (int64), state (int64: index into STATES), time.time()
STATES = (
    "start",
    "local",
    "compute",
    "send",
    "recv",
    "sendrecv",
    "allreduce",
    "exchange",
    "allgather",
    "evaluate",
    "barrier",
    "done",
    "killed",
    "failed",
    "interrupted",
)
BLOCKING = frozenset(
    {"send", "recv", "sendrecv", "allreduce", "exchange", "allgather", "evaluate", "barrier"}
)
FINAL = frozenset({"done", "killed", "failed", "interrupted"})
HEARTBEAT = ".heartbeat"
MIN_TIMEOUT_S = 60.0
TIMEOUT_FACTOR = 10.0


class Heartbeat:
    """This rank's record in ``folder/.heartbeat`` (created by whoever comes first)."""

    def __init__(self, folder, rank):
        self.rank = rank
        self.path = Path(folder) / HEARTBEAT
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._map, self._at = None, rank * RECORD.size
        # the first record by pwrite: it makes the file long enough for this rank's record and
        # never shortens it under another rank's, as a truncate could
        self.beat(0, "start")
        page = self._at - self._at % mmap.ALLOCATIONGRANULARITY  # a map starts on a page
        try:
            self._map = mmap.mmap(self._fd, self._at + RECORD.size - page, offset=page)
        except (OSError, ValueError):  # a file system that maps no files: a pwrite a beat
            return
        self._at -= page
        os.close(self._fd)  # the map keeps the file
        self._fd = None

    def beat(self, step, state):
        """Say that this rank is in ``step`` doing ``state`` (one of `STATES`) from now on."""
        self.step, self.state = step, state
        if self._map is not None:
            RECORD.pack_into(self._map, self._at, step, STATES.index(state), time.time())
        else:
            os.pwrite(self._fd, RECORD.pack(step, STATES.index(state), time.time()), self._at)

    def close(self):
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_heartbeats(folder, size):
    """Every rank's ``(step, state, seconds since its last beat)``; None for a rank that never
    beat."""
    try:
        data = (Path(folder) / HEARTBEAT).read_bytes()
    except OSError:
        data = b""
    now, found = time.time(), []
    for rank in range(size):
        chunk = data[rank * RECORD.size : (rank + 1) * RECORD.size]
        if len(chunk) < RECORD.size or chunk == bytes(RECORD.size):
            found.append(None)
            continue
        step, state, when = RECORD.unpack(chunk)
        found.append((step, STATES[state] if 0 <= state < len(STATES) else "?", now - when))
    return found


def missing_ranks(beats, step):
    """Ranks that have not arrived where a rank blocked in ``step`` waits: behind in steps, or
    in ``step`` but not in a blocking operation (computing, or stuck in their own code)."""
    late = []
    for rank, beat in enumerate(beats):
        if beat is None:
            late.append(rank)
            continue
        their_step, state, _ = beat
        if state in FINAL or their_step < step or (their_step == step and state not in BLOCKING):
            late.append(rank)
    return late


def describe(beats, ranks):
    """``rank 3 (step 40, compute, last heard 61.2 s ago)`` for each of ``ranks``."""
    parts = []
    for rank in ranks:
        beat = beats[rank]
        parts.append(
            f"rank {rank} (never started)"
            if beat is None
            else f"rank {rank} (step {beat[0]}, {beat[1]}, last heard {beat[2]:.1f} s ago)"
        )
    return ", ".join(parts)


class Watchdog:
    """Watches this rank's blocking operations from a daemon thread.

    Parameters
    ----------
    heartbeat : Heartbeat
    size : int
        Ranks in the job (whose heartbeats are read when it fires).
    timeout_s : float or None
        A fixed timeout (``--watchdog 30s``); None: ``max(MIN_TIMEOUT_S, TIMEOUT_FACTOR x`` the
        longest step or evaluation seen); ``math.inf`` never fires.
    on_fire : callable(str)
        Called (in the watchdog thread) with the one-line reason; it marks the run failed and
        aborts the job.
    """

    def __init__(self, heartbeat, size, timeout_s, on_fire, poll_s=0.5):
        self.heartbeat, self.size, self.fixed_s = heartbeat, size, timeout_s
        self.on_fire, self.poll_s = on_fire, poll_s
        self.longest_s = 0.0
        self._entered = None  # time.monotonic() when the current blocking operation began
        self._thread = None
        if timeout_s != math.inf:
            self._thread = threading.Thread(target=self._watch, daemon=True, name="watchdog")
            self._thread.start()

    @property
    def timeout_s(self):
        if self.fixed_s is not None:
            return self.fixed_s
        return max(MIN_TIMEOUT_S, TIMEOUT_FACTOR * self.longest_s)

    def enter(self, step, state):
        """The rank starts ``state`` (an operation, or its own code) in ``step``."""
        self.heartbeat.beat(step, state)
        self._entered = time.monotonic() if state in BLOCKING else None

    def took(self, seconds):
        """A step or an evaluation took ``seconds``: the automatic timeout follows the longest."""
        self.longest_s = max(self.longest_s, seconds)

    def stop(self, state="done", step=None):
        """The rank leaves (``done``, ``failed``, ``killed`` ...) in ``step`` (default: the
        last one it beat in)."""
        self._entered = None
        self.heartbeat.beat(self.heartbeat.step if step is None else step, state)

    def _watch(self):
        while True:
            time.sleep(self.poll_s)
            entered = self._entered
            if entered is None or time.monotonic() - entered < self.timeout_s:
                continue
            waited = time.monotonic() - entered
            step, state = self.heartbeat.step, self.heartbeat.state
            beats = read_heartbeats(self.heartbeat.path.parent, self.size)
            late = missing_ranks(beats, step)
            who = (
                f"{describe(beats, late)} did not arrive"
                if late
                else "every rank is blocked (a deadlock: operations that do not match)"
            )
            blocked = [r for r, b in enumerate(beats) if b is not None and b[1] in BLOCKING]
            reason = (
                f"watchdog: rank {self.heartbeat.rank} waited {waited:.1f} s in {state} "
                f"at step {step}; {who}"
            )
            self.on_fire(reason, not blocked or blocked[0] == self.heartbeat.rank)
            return
