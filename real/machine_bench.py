"""How this machine's cores and memory behave when several processes want them at once, as the
ranks of a run past its cores, or of one machine, do. `real.calibrate` writes what these measure
into the profile; `sim.cores` and `sim.network` use it.

- The turn a process gets on a core when more processes want the cores than there are
  (``[cluster] time_slice_s``, `measure_time_slice`).
- What a model's gradient takes more right after another process ran on its core, its caches
  refilled (``[compute] switch_s``, `measure_switch_s`).
- A model's training step in k processes at once, over one alone (``[compute.busy.MODEL]``,
  `measure_busy_cores`), in worker processes that compute in windows on demand (`busy_worker`,
  `start_window`, `finish_window`: `real.stack_cpu` times the compute lost beside a transfer
  with them).
- How many copies the memory moves at once at one copy's rate (``[cluster] memory_copies``,
  `measure_memory_copies`).

Each runs its processes as fresh interpreters (``python -c``), started and ended here, so a
measurement sees the machine as a run's ranks do: placed by the operating system, one BLAS
thread each.
"""

import os
import subprocess
import sys
import time

import numpy as np

from twinsgd.calibration.busycores import busy_cores_from_windows

_SPINNER = """
import time
end = time.perf_counter() + {seconds}
last = time.perf_counter()
gaps = []
while last < end:
    now = time.perf_counter()
    if now - last > 30e-6:
        gaps.append(now - last)
    last = now
print(" ".join(repr(g) for g in gaps))
"""


def measure_time_slice(seconds=0.5):
    """A turn on a core when more processes want the cores than there are (`sim.cores`), in
    seconds: two spinning processes a core for ``seconds``, each noting the gaps in its own
    clock (when it was off its core); with two a core every gap is one turn of the other, so
    the median gap, weighted by duration. This machine: 4 ms (the 250 Hz tick). None if it
    cannot be measured (fewer gaps than spinners)."""
    count = 2 * (os.cpu_count() or 1)
    spinners = [
        subprocess.Popen(
            [sys.executable, "-c", _SPINNER.format(seconds=seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    gaps = []
    for spinner in spinners:
        out, _ = spinner.communicate(timeout=60)
        gaps += [float(x) for x in out.split()]
    if len(gaps) < count:
        return None
    # weighted by duration: brief interruptions (another process waking for microseconds, more
    # of them than turns) moved the plain median to 0.12 ms
    gaps = np.sort(gaps)
    weight = np.cumsum(gaps)
    return float(gaps[np.searchsorted(weight, weight[-1] / 2)])


_SWITCHER = """
import os
import time
import numpy as np
from models import build_model
from models.threads import one_blas_thread
one_blas_thread()
os.sched_setaffinity(0, {{{cpu}}})  # one core for both: each turn comes after the other's
rng = np.random.default_rng({seed})
model = build_model({name!r}, {shape!r}, {classes}, seed=0)
X = rng.random({batch_shape!r}).astype(model.dtype)
y = rng.integers(0, {classes}, {batch})
grad = np.empty(model.n_params, dtype=model.dtype)
model.loss_and_gradient(X, y, out=grad)
differences = []  # a turn's cold step less its warm one, seconds
end = time.perf_counter() + {seconds}
while True:
    if not ({first} and not differences):  # the other's turn is done: this one's caches are cold
        if os.read({read}, 1) in (b"e", b""):  # the other ended (or died): stop
            break
    t0 = time.process_time()
    model.loss_and_gradient(X, y, out=grad)
    t1 = time.process_time()
    model.loss_and_gradient(X, y, out=grad)  # the same step again, warm
    differences.append((t1 - t0) - (time.process_time() - t1))
    done = len(differences) >= {turns} and time.perf_counter() > end
    os.write({write}, b"e" if done else b"x")
    if done:
        break
print(*differences)
"""


def measure_switch_s(model, dataset, batch, quick=False):
    """The median of `switch_once` over 3 tries (1 with ``quick``): this machine's tries of the
    MLP moved between 85 and 120 us from one to the next. None where any try could not be
    measured (a machine that refuses to pin a process to a core)."""
    tries = [switch_once(model, dataset, batch, quick) for _ in range(1 if quick else 3)]
    return None if None in tries else float(np.median(tries))


SWITCH_TURNS = 12  # turns of each process at the least (quick: half)


def switch_once(model, dataset, batch, quick=False):
    """``[compute] switch_s`` of ``model``: the CPU seconds a gradient on a batch of ``batch``
    takes more when another process ran on its core since its last one (its caches refilled),
    as ranks past the cores do between their steps (`sim.cores`). Two processes on one core
    take turns; in each turn a gradient comes after the other's (cold) and then once more
    (warm), so both are timed at the same moment of the machine's drift: the median of the
    turns' differences (floored at 0), over at least `SWITCH_TURNS` turns of each process.
    This machine (2026-11-27): the MLP at batch 32 0.29 ms warm and 70-120 us more cold.

    Why the median of that many turns, and 0 where it is within its own noise (under twice
    its standard error): this machine changes speed by 1.4-1.6x within seconds, which a turn's
    two steps may straddle. The CNN's turns (steps of tens of ms, 2-3 turns in half a second)
    differed by -41 to +12 ms (2026-12-01), their mean came out 0, 0, 1.7, 4.3 and 5.0 ms in
    five tries, and the simulator's turns of 4 ms could not hold such a refill; the MLP's
    differed by tens of us about 90. None if either process failed (one that cannot be
    pinned)."""
    cpu = max(os.sched_getaffinity(0))
    fds = os.pipe() + os.pipe()  # (read, write) of 0 -> 1, then of 1 -> 0
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _SWITCHER.format(
                    cpu=cpu,
                    seed=i,
                    **step_fields(model, dataset, batch),
                    seconds=0.5 if quick else 1.5,
                    turns=SWITCH_TURNS // 2 if quick else SWITCH_TURNS,
                    first=i == 0,
                    read=fds[2] if i == 0 else fds[0],
                    write=fds[1] if i == 0 else fds[3],
                ),
            ],
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=fds,
        )
        for i in range(2)
    ]
    for fd in fds:
        os.close(fd)
    outputs = [p.communicate(timeout=300)[0].split() for p in processes]
    if any(p.returncode != 0 or not out for p, out in zip(processes, outputs, strict=True)):
        return None
    return resolved_median([float(x) for out in outputs for x in out])


def resolved_median(samples):
    """The median of ``samples`` where it stands out of their noise (at least twice its
    standard error, ``1.2533 * 1.4826 * MAD / sqrt(n)``) and is positive; else 0.

    >>> resolved_median([90e-6, 95e-6, 88e-6, 92e-6, 85e-6, 91e-6])
    9.05e-05
    >>> resolved_median([5e-3, -8e-3, 7e-3, -3e-3, 0.4e-3, 9e-3])
    0.0
    """
    x = np.asarray(samples, dtype=np.float64)
    median = float(np.median(x))
    error = 1.2533 * 1.4826 * float(np.median(np.abs(x - median))) / np.sqrt(len(x))
    return median if median > 0 and median >= 2 * error else 0.0


_BUSY = """
import os
import sys
import time
import numpy as np
from models import build_model, make_optimizer
from models.threads import one_blas_thread
one_blas_thread()
{pin}
rng = np.random.default_rng({seed})
model = build_model({name!r}, {shape!r}, {classes}, seed=0)
X = rng.random({batch_shape!r}).astype(model.dtype)
y = rng.integers(0, {classes}, {batch})
grad = np.empty(model.n_params, dtype=model.dtype)
adam = make_optimizer("adam", model.n_params, lr=1e-6)
while line := sys.stdin.readline():  # asleep between windows; a window is its seconds
    end = time.perf_counter() + float(line)
    steps = []
    while time.perf_counter() < end or len(steps) < 3:
        t0 = time.perf_counter()
        model.loss_and_gradient(X, y, out=grad)
        adam.step(model.params, grad)
        steps.append(time.perf_counter() - t0)
    print(np.median(steps[len(steps) // 5:]), flush=True)  # past the first fifth: warm
"""


def busy_counts(cores):
    """The counts of processes `measure_busy_cores` runs at once: 1, 2, 4, ... and ``cores``."""
    counts = {1, cores}
    k = 2
    while k < cores:
        counts.add(k)
        k *= 2
    return sorted(counts)


def measure_busy_cores(model, dataset, batch, quick=False):
    """``[compute.busy.MODEL]`` (`calibration.busycores`): ``model``'s training step (its
    gradient on a batch of ``batch`` and Adam's update, 1 BLAS thread) in k processes at once,
    for each k of `busy_counts` up to this machine's cores, placed by the operating system as
    a run's ranks are. The processes start once and sleep between windows; in each window k
    of them compute for 0.3 s (0.15 s with ``quick``), and just before it the first computes
    alone, so the machine's drift cancels (one process alone moved by 30 % from one try to
    the next on a 16-core machine under gVisor). 5 windows per k (3 with ``quick``): the mean
    factor at k is the median over windows of the k processes' mean over the one alone; the
    spread about it, each process over the mean of its window, pooled. Measured (MLP, batch
    100): this 2-core machine 0.98-1.03x at 2 processes."""
    seconds, windows = (0.15, 3) if quick else (0.3, 5)
    counts = busy_counts(os.cpu_count() or 1)
    workers = [busy_worker(model, dataset, batch, i) for i in range(counts[-1])]
    try:
        window(workers, seconds)  # every process warm
        ratios = {k: [1.0] if k == 1 else [] for k in counts}
        spread = {k: [1.0] if k == 1 else [] for k in counts}
        for k in counts[1:]:
            for _ in range(windows):
                alone = window(workers[:1], seconds)[0]
                times = np.asarray(window(workers[:k], seconds))
                ratios[k].append(times.mean() / alone)
                spread[k].extend(times / times.mean())
    finally:
        stop_workers(workers)
    return busy_cores_from_windows(ratios, spread)


def busy_worker(model, dataset, batch, seed, cpu=None):
    """A process that computes ``model``'s steps for the seconds it reads, a window a line,
    and writes each window's median step seconds (`_BUSY`); on core ``cpu`` alone if given
    (else where the operating system puts it)."""
    pin = f"os.sched_setaffinity(0, {{{cpu}}})" if cpu is not None else ""
    script = _BUSY.format(seed=seed, pin=pin, **step_fields(model, dataset, batch))
    return subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def stop_workers(workers):
    """End `busy_worker`s: the end of its input ends each; wait for it (60 s at most)."""
    for worker in workers:
        worker.stdin.close()
        worker.wait(timeout=60)
        worker.stdout.close()


def step_fields(model, dataset, batch):
    """What the scripts of a process that times ``model``'s step (`_SWITCHER`, `_BUSY`) fill
    in: the model's name, its input's shape and classes, the batch and the batch's shape."""
    return {
        "name": model,
        "shape": tuple(dataset.input_shape),
        "classes": dataset.n_classes,
        "batch": batch,
        "batch_shape": (batch, *dataset.input_shape),
    }


def window(workers, seconds):
    """Start a window of ``seconds`` in each of ``workers`` at once; their median steps."""
    start_window(workers, seconds)
    return finish_window(workers)


def start_window(workers, seconds):
    """Start a window of ``seconds`` in each of ``workers`` at once."""
    for worker in workers:
        worker.stdin.write(f"{seconds}\n")
        worker.stdin.flush()


def finish_window(workers):
    """Each of ``workers``' median step in the window it was given, once it is over."""
    return [float(worker.stdout.readline()) for worker in workers]


_COPIER = """
import time
import numpy as np
src = np.ones({elements}, np.float32)
dst = np.empty_like(src)
np.copyto(dst, src)
while time.time() < {start}:
    pass
begin = time.perf_counter()
end, copies = begin + {seconds}, 0
while time.perf_counter() < end:
    np.copyto(dst, src)
    copies += 1
print(copies * src.nbytes / (time.perf_counter() - begin))
"""


def copy_rate(processes, seconds=0.2, nbytes=2**22):
    """Bytes per second that ``processes`` processes copy together, each a buffer of ``nbytes``
    (beyond a core's own cache) over and over for ``seconds``, all starting at one moment."""
    start = time.time() + 0.3 + 0.03 * processes  # after every interpreter has started
    copiers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _COPIER.format(elements=nbytes // 4, start=start, seconds=seconds),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    return sum(float(copier.communicate(timeout=60)[0]) for copier in copiers)


def measure_memory_copies(quick=False):
    """``[cluster] memory_copies``: the copies this machine's memory moves at once at the rate
    the calibration's pair of ranks measured. That pair copied 2 at once (a Sendrecv's two
    directions), so: 2 x the copy rate of a process on every core over that of 2 processes
    (the mean of 2 tries each; 1 with ``quick``); at most 2 cores, 2. Ranks of one machine
    copy every message through its memory: 16 ranks of a 16-core machine exchanging 670 KB
    with two neighbours each took 1.29 ms a step against 0.11 ms at 2 ranks, a limit the
    pair's own copies do not meet."""
    cores = os.cpu_count() or 1
    if cores <= 2:
        return 2.0
    tries = 1 if quick else 2
    pair = float(np.mean([copy_rate(2) for _ in range(tries)]))
    together = float(np.mean([copy_rate(cores) for _ in range(tries)]))
    return max(2.0, 2 * together / pair)
