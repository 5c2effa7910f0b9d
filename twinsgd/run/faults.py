"""A fault schedule: which rank fails, how, and when; one file format for both backends.

``--faults FILE.toml`` lists faults as an array of tables named ``fault`` (as Horovod Elastic's
tests kill ranks at a given batch, and Hivemind injects fail and slow faults)::

    [[fault]]
    rank = 3
    step = 40
    kind = "kill"        # the process dies at once (SIGKILL: nothing runs after it)

    [[fault]]
    rank = 1
    step = 10
    kind = "slow"        # its compute takes `factor` times as long ...
    factor = 5.0
    steps = 10           # ... for steps 10..19

``kind = "exception"`` raises `InjectedFault` in the rank's program (a bug, as an uncaught
exception would be). A fault strikes when the rank starts its step ``step`` (1-based, the rank's
own count: an asynchronous server's steps are pushes), so steps ``1 .. step-1`` completed. Instead
of ``step``, ``time = "12.5s"`` strikes at that time of the run's training clock (the simulator's
``--fail 3@12.5s`` is the schedule ``[[fault]] rank = 3, time = "12.5s", kind = "kill"``).

Examples
--------
>>> schedule = parse_faults([{"rank": 1, "step": 4, "kind": "slow", "factor": 3.0, "steps": 2}])
>>> [schedule.slowdown(1, step) for step in (3, 4, 5, 6)]
[1.0, 3.0, 3.0, 1.0]
>>> parse_fail_spec("3@12.5s,0@2ms").faults[0]
Fault(rank=3, kind='kill', step=None, time_s=12.5, factor=1.0, steps=1)
"""

import math
from dataclasses import dataclass

from twinsgd.run.tomlfile import read_toml
from twinsgd.run.units import parse_seconds

KINDS = ("kill", "exception", "slow")
_KEYS = {"rank", "step", "time", "kind", "factor", "steps"}


class InjectedFault(RuntimeError):
    """The error a ``kind = "exception"`` fault raises inside a node program."""


@dataclass(frozen=True)
class Fault:
    """One scheduled fault of one rank (seconds on the run's training clock; steps 1-based)."""

    rank: int
    kind: str
    step: int | None = None
    time_s: float | None = None
    factor: float = 1.0
    steps: int = 1

    def describe(self):
        """What the run folder says of it: ``rank 3 killed at step 40``."""
        verb = {
            "kill": "killed",
            "exception": "raised an injected exception",
            "slow": f"slowed {self.factor:g}x for {self.steps} step(s)",
        }[self.kind]
        when = f"step {self.step}" if self.step is not None else f"{self.time_s:g} s"
        return f"rank {self.rank} {verb} at {when}"


@dataclass(frozen=True)
class FaultSchedule:
    """The faults of one run, in the order given."""

    faults: tuple = ()

    def __bool__(self):
        return bool(self.faults)

    def for_rank(self, rank):
        """The faults of ``rank``."""
        return tuple(f for f in self.faults if f.rank == rank)

    def failure_at(self, rank, step):
        """The kill or exception fault striking ``rank`` as it starts ``step``, else None."""
        for fault in self.faults:
            if fault.rank == rank and fault.step == step and fault.kind != "slow":
                return fault
        return None

    def slowdown(self, rank, step):
        """Factor on ``rank``'s compute time during ``step`` (1.0 when no slow fault covers it)."""
        factor = 1.0
        for f in self.faults:
            if (
                f.rank == rank
                and f.kind == "slow"
                and f.step is not None
                and f.step <= step < f.step + f.steps
            ):
                factor *= f.factor
        return factor

    def check_size(self, size, where="--faults"):
        """Raise ValueError naming the schedule when a fault names a rank the run does not have."""
        for f in self.faults:
            if f.rank >= size:
                raise ValueError(
                    f"{where}: fault of rank {f.rank}, but the run has ranks 0..{size - 1}"
                )
        return self


def load_faults(path):
    """Read ``--faults FILE.toml`` into a `FaultSchedule`; ValueError naming the file and the
    rule broken."""
    where = f"--faults {path}"
    document = read_toml(path, where)
    unknown = set(document) - {"fault"}
    if unknown:
        raise ValueError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (faults are [[fault]] tables)"
        )
    entries = document.get("fault", [])
    if not isinstance(entries, list):
        raise ValueError(f"{where}: 'fault' must be an array of tables ([[fault]])")
    return parse_faults(entries, where)


def parse_faults(entries, where="--faults"):
    """A `FaultSchedule` from a list of dicts as the TOML file holds them; ValueError naming
    ``where``, the entry and the rule."""
    return FaultSchedule(
        tuple(_fault(entry, f"{where}: fault {i + 1}") for i, entry in enumerate(entries))
    )


def parse_fail_spec(spec):
    """The simulator's ``--fail NODE@TIME[,...]`` as a schedule of kills at training-clock
    times; ValueError naming the flag."""
    faults = []
    for item in spec.split(",") if spec else []:
        node, at, when = item.partition("@")
        if not at or not node.strip().isdigit():
            raise ValueError(f"--fail expects NODE@TIME, e.g. 3@12.5s, got {item!r}")
        try:
            time_s = parse_seconds(when)
        except ValueError as err:
            raise ValueError(f"--fail {item}: {err}") from err
        if not math.isfinite(time_s):
            raise ValueError(f"--fail {item}: the time must be finite")
        faults.append(Fault(rank=int(node), kind="kill", time_s=time_s))
    return FaultSchedule(tuple(faults))


def _fault(entry, where):
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be a table, got {entry!r}")
    unknown = set(entry) - _KEYS
    if unknown:
        raise ValueError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (keys: {', '.join(sorted(_KEYS))})"
        )
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    rank = _integer(entry, "rank", where, minimum=0)
    if ("step" in entry) == ("time" in entry):
        raise ValueError(f"{where}: give exactly one of step or time")
    step = _integer(entry, "step", where, minimum=1) if "step" in entry else None
    time_s = None
    if "time" in entry:
        if kind == "slow":
            raise ValueError(f"{where}: a slow fault takes a step, not a time")
        try:
            time_s = parse_seconds(entry["time"])
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from err
        if not math.isfinite(time_s):
            raise ValueError(f"{where}: time must be finite, got {entry['time']!r}")
    factor, steps = 1.0, 1
    if kind == "slow":
        factor = entry.get("factor")
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not 1.0 <= factor < math.inf
        ):
            raise ValueError(
                f"{where}: a slow fault's factor must be a number >= 1, got {factor!r}"
            )
        steps = _integer(entry, "steps", where, minimum=1) if "steps" in entry else 1
        factor = float(factor)
    elif "factor" in entry or "steps" in entry:
        raise ValueError(f'{where}: factor and steps belong to kind = "slow"')
    return Fault(rank=rank, kind=kind, step=step, time_s=time_s, factor=factor, steps=steps)


def _integer(entry, key, where, minimum):
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{where}: {key} must be an integer >= {minimum}, got {value!r}")
    return value
