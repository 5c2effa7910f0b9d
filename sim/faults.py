"""A run's faults acted out in simulated time, as the real backend acts them out on a real clock.

A fault of the schedule (`run.faults`) strikes as its rank starts step ``step`` (its own count) or
at ``time`` on the simulated clock. A kill ends the node's process there; an exception raises
`InjectedFault` out of the run; a slow fault multiplies the node's compute time. A kill shows
when the simulation has nothing left to do but nodes still wait, as ULFM MPI reports a failed
peer to a blocked operation: `PeerFailed` is thrown into the programs whose operation involves a
failed node (`SimulatedFaults.told`), which go on without it or (uncaught) end the run.

Kept apart from `sim.backend.Simulator`, which drives programs and accounts time, so the driver
asks one question per step (``faults.active``) and a run without faults pays nothing else.
"""

from twinsgd.programs.ops import ANY_SOURCE, Exchange, PeerFailed, Recv, Send, SendRecv
from twinsgd.run.faults import Fault, FaultSchedule, InjectedFault


class Crash:
    """The cause of the interrupt that stops a node killed at a time."""


class Killed(BaseException):
    """Raised inside a node program at the step a scheduled kill strikes; ends its process (not
    an Exception: no program's ``except`` may catch a kill)."""


def waits_on(op):
    """The nodes an operation waits on: a set of ranks (ANY_SOURCE among them for a receive from
    anyone), or None for a collective (every node)."""
    if isinstance(op, Recv):
        return {op.source}
    if isinstance(op, Send):
        return {op.dest}
    if isinstance(op, SendRecv):
        return {op.dest, op.source}
    if isinstance(op, Exchange):
        return set(op.payloads)
    return None


class SimulatedFaults:
    """The faults of one simulated run and what they did.

    Parameters
    ----------
    env : simpy.Environment
        The simulator's clock.
    schedule : run.faults.FaultSchedule
        The run's faults (empty: nothing happens, ``active`` is False).
    step_no : list of int
        The step each rank is in (1-based, its own count), kept by the simulator.
    on_kill : callable(rank), optional
        Told after a node is killed (the simulator releases rendezvous the others now complete).

    Attributes
    ----------
    failed : dict
        rank -> simulated time (s) it failed at.
    failures : dict
        rank -> what happened to it (``rank 3 killed at step 40``).
    """

    def __init__(self, env, schedule=None, step_no=(), on_kill=None):
        self.env = env
        self.schedule = schedule or FaultSchedule()
        self.active = bool(self.schedule)  # asked at every compute and step end
        self.step_no = step_no
        self.on_kill = on_kill
        self.failed = {}
        self.failures = {}

    def start(self, processes):
        """Schedule the faults given at a time against the nodes' SimPy ``processes``."""
        for fault in self.schedule.faults:
            if fault.time_s is not None:
                self.env.process(self._strike_at(processes[fault.rank], fault))

    def _strike_at(self, process, fault):
        yield self.env.timeout(max(0.0, fault.time_s - self.env.now))
        if process.is_alive:
            if fault.kind == "kill":
                self._record_kill(fault)
            process.interrupt(Crash() if fault.kind == "kill" else fault)

    def strike(self, rank):
        """Act out the kill (raise `Killed`) or exception (raise `InjectedFault`) of ``rank`` at
        the start of the step it is in; called from the program's own code, as the real backend
        strikes in its step-end hook."""
        fault = self.schedule.failure_at(rank, self.step_no[rank])
        if fault is None:
            return
        if fault.kind == "kill":
            self._record_kill(fault)
            raise Killed()
        raise InjectedFault(fault.describe())

    def slowdown(self, rank):
        """Factor on ``rank``'s compute time in the step it is in (a slow fault; else 1.0)."""
        return self.schedule.slowdown(rank, self.step_no[rank])

    def _record_kill(self, fault):
        self.failed[fault.rank] = self.env.now
        self.failures[fault.rank] = fault.describe()
        if self.on_kill is not None:
            self.on_kill(fault.rank)

    def notify(self, processes, current):
        """Run the clock on while nodes wait on failed ones: throw `PeerFailed` into those told
        (`told`) until every live node has ended. ``current``: each rank's operation in progress.
        RuntimeError when nodes wait with none failed (a bug in a program) or ignore notices."""
        notices = 0
        while waiting := [
            r for r, p in enumerate(processes) if p.is_alive and r not in self.failed
        ]:
            if not self.failed:
                raise RuntimeError(f"nodes {waiting} wait forever")
            notices += 1  # a program that catches the notice must make progress or end
            if notices > 2 * len(processes):
                raise RuntimeError(
                    f"nodes {waiting} go on waiting after {notices - 1} failure notices"
                )
            notice = PeerFailed(
                sorted(self.failed.items()), [self.failures[r] for r in sorted(self.failed)]
            )
            for rank in self.told(waiting, current):
                processes[rank].interrupt(notice)
            self.env.run()

    def told(self, waiting, current):
        """Which of the ``waiting`` nodes learn of the failures: those whose operation involves a
        failed node (as ULFM reports it to the operations that would need it), else those that
        wait on any source (a server that cannot tell who will not come), else the lowest."""
        involved, any_source = [], []
        for rank in waiting:
            peers = waits_on(current[rank])
            if peers is None or peers & self.failed.keys():
                involved.append(rank)
            elif ANY_SOURCE in peers:
                any_source.append(rank)
        return involved or any_source or waiting[:1]

    @staticmethod
    def killed(cause):
        """Whether an interrupt of a node's process with ``cause`` ends it (a kill at a time);
        raises `InjectedFault` for an exception fault at a time; False for a notice that the
        program is told of (`PeerFailed`)."""
        if isinstance(cause, Fault):
            raise InjectedFault(cause.describe()) from None
        return isinstance(cause, Crash)
