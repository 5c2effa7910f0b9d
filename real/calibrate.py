"""``python -m real.calibrate``: measure this machine and write a cluster profile for ``sim.run``.

Examples
--------
Two ranks (on one host: the shared-memory path; one rank per host measures the network)::

    mpiexec -n 2 python -m real.calibrate --out profiles/this-machine.toml
    mpiexec -n 2 -ppn 1 -hosts a,b python -m real.calibrate --out profiles/cluster.toml
    python -m sim.run --profile profiles/this-machine.toml --compute profile ...

What is measured
----------------
- Network: a blocking ping-pong (``Send``/``Recv`` of float32 buffers) between ranks 0 and 1 for
  message sizes 8 B .. 16 MiB (powers of 2; ``--quick``: powers of 4 to 8 MiB), as the OSU
  latency benchmark does it: a barrier before each batch of round trips, warm-up round trips
  discarded, fewer repetitions for large sizes. One-way time = median over 20 (``--quick``: 12)
  batches of the batch's mean round trip, / 2; the sizes are interleaved, one batch of each per
  pass (see `_ping_pong` for why). The line ``t(n) = alpha + n / beta`` is fitted to it by
  `fit_alpha_beta`.
- Compute: rank 0 times one training step, ``model.loss_and_gradient(X, y)`` and an Adam update
  (the default optimizer: the simulator charges a profile's compute to the gradient's Compute and
  nothing to the program's own code, so the update belongs in it), on one batch of
  ``--batch-size`` samples of ``--dataset`` for each of ``--models``, with one BLAS thread;
  median over repetitions after warm-up.

Ranks beyond 2 take no part; they wait. Every wait between phases is a *quiet* barrier
(``Ibarrier`` polled with sleeps), because MPICH's blocking ``Barrier`` and ``Recv`` busy-poll: a
waiting rank burns a whole core (measured here: 65% of a core in ``Barrier``, 2% quiet), which on a
2-core machine is the core rank 0's BLAS or the ping-pong partner would otherwise have.

The profile (read by ``sim.cluster_profile.load_profile``)::

    [cluster]    name, calibrated = true, source (tool, MPI library, ranks, hosts), cores
    [network]    topology = "star", latency = "1.23us" (alpha), bandwidth = "5.67GB/s" (beta)
    [network.fit]  sizes (bytes), seconds (one-way), r2: the measured points of the fit
    [compute]    flops_per_s, seconds_per_sample = {mlp = .., cnn = ..}, batch_size, dataset,
                 flops_per_sample = {mlp = .., cnn = ..} (forward FLOPs, for checking flops_per_s)

``flops_per_s`` is the sustained training rate of one rank, ``3 * flops_per_sample /
seconds_per_sample`` (a training sample costs three forward passes), of the median model (the lower
median when the count is even, so that it is one model's own rate).

Exit status: 0 done; 2 bad input (one line on stderr from rank 0, every rank exits 2); 1 a bug (an
exception on any rank aborts the whole job, so nobody hangs). The file is written atomically.
"""

import datetime
import os
import socket
import sys
import time
import traceback
from pathlib import Path

import numpy as np
from mpi4py import MPI

from data import NAMES, DataError, load_dataset
from models import MODELS, build_model, make_optimizer
from real.cli import RankZeroParser

SIZES = [2**k for k in range(3, 25)]  # 8 B .. 16 MiB, bytes
QUICK_SIZES = [8 * 4**k for k in range(11)]  # 8 B .. 8 MiB, bytes
_TAG = 17


def build_parser():
    parser = RankZeroParser(
        prog="python -m real.calibrate",
        description="Measure this machine under mpiexec -n 2 (ping-pong between ranks 0 and 1, "
                    "the training step of each model on rank 0) and write a cluster profile "
                    "(TOML) for python -m sim.run --profile.")
    parser.add_argument("--out", default="profiles/this-machine.toml", metavar="FILE",
                        help="the profile to write (default: %(default)s)")
    parser.add_argument("--dataset", default="mnist-subset",
                        help=f"data the models are timed on: {', '.join(NAMES)} "
                             f"(default: %(default)s, bundled)")
    parser.add_argument("--data-dir", metavar="D", help="folder holding <dataset>/ subfolders")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated models to time (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=100,
                        help="samples per timed step (default: %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="fewer sizes and repetitions (seconds, for tests; noisier)")
    return parser


def main(argv=None):
    comm = MPI.COMM_WORLD
    parser = build_parser()
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if comm.size < 2:
        parser.error(f"needs at least 2 MPI ranks for the ping-pong, got {comm.size}: run it as "
                     f"mpiexec -n 2 python -m real.calibrate")
    try:
        if args.dataset not in NAMES:
            raise ValueError(f"--dataset must be one of {', '.join(NAMES)}, got {args.dataset!r}")
        args.models = _check_models(args.models)
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
        work = _prepare(args, comm)
    except (DataError, ValueError) as err:
        parser.error(str(err))
    hosts = comm.gather(MPI.Get_processor_name(), root=0)
    try:
        per_model = _measure_compute(*work, args.quick) if comm.rank == 0 else None
        _quiet_barrier(comm)  # the others wait here, sleeping, while rank 0 computes
        sizes = QUICK_SIZES if args.quick else SIZES
        seconds = _measure_network(comm, sizes, args.quick)
        if comm.rank == 0:
            _finish(args, hosts, sizes, seconds, per_model, work, started)
    except Exception:
        if comm.size > 1:
            traceback.print_exc()
            sys.stderr.flush()
            comm.Abort(1)
        raise
    return 0


def _check_models(text):
    names = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in names if m not in MODELS]
    if not names or unknown:
        raise ValueError(f"--models must be a comma-separated list of {', '.join(MODELS)}, "
                         f"got {text!r}")
    return names


def _prepare(args, comm):
    """On rank 0, check the output path, load the data and build the models; a problem stops
    every rank with the same one-line message. Returns (models, X, y, dataset) on rank 0, an empty
    tuple elsewhere. Collective."""
    work, problem = (), None
    if comm.rank == 0:
        try:
            work = _load(args)
        except (DataError, ValueError, OSError) as err:
            problem = str(err)
    problem = comm.bcast(problem, root=0)
    if problem is not None:
        raise ValueError(problem)
    return work


def _load(args):
    out = Path(args.out)
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give a file name such as {out}/profile.toml")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot create its folder ({err.strerror})") from err
    if not os.access(out.parent, os.W_OK):
        raise ValueError(f"--out {out}: folder {out.parent} is not writable")
    allow_download = os.environ.get("TWINSGD_OFFLINE") != "1"
    dataset = load_dataset(args.dataset, args.data_dir, allow_download=allow_download)
    if dataset.note:
        print(dataset.note, file=sys.stderr)
    if args.batch_size > dataset.n_train:
        raise ValueError(f"--batch-size {args.batch_size} is larger than {dataset.name}'s "
                         f"{dataset.n_train} training samples")
    X, y = dataset.train_batch(np.arange(args.batch_size))
    models = {name: build_model(name, dataset.input_shape, dataset.n_classes, seed=0)
              for name in args.models}
    return models, X, y, dataset


# ---------------------------------------------------------------------------- fitting
def fit_alpha_beta(nbytes, seconds):
    """Fit the Hockney model ``t(n) = alpha + n / beta`` to one-way message times.

    The fit minimises the *relative* residuals, ``sum(((alpha + n_i / beta - t_i) / t_i)**2)``
    (least squares with weights ``1 / t_i``; linear in ``alpha`` and ``1 / beta``), with
    ``alpha >= 0``. Why: the times span three or four decades. Ordinary least squares lets the
    largest messages, whose absolute residuals are a thousand times larger, decide both numbers,
    and ``alpha`` comes out as noise (often negative). Counting each point's error as a fraction
    of its own time makes the small messages, where ``alpha`` is nearly all of ``t``, determine
    ``alpha``, and the large ones, where ``n / beta`` is, determine ``beta``; it is the linear
    counterpart of fitting ``log t``, and unlike fitting ``alpha`` to small sizes and ``beta`` to
    large ones separately it needs no cut-off size and uses every point.

    Parameters
    ----------
    nbytes : (k,) array of int
        Message sizes, bytes; at least 2 distinct, all > 0.
    seconds : (k,) array of float
        The one-way time of each size, seconds, all > 0.

    Returns
    -------
    alpha_s : float
        Latency, seconds (>= 0).
    beta_Bps : float
        Bandwidth, bytes per second (> 0).
    r2 : float
        Coefficient of determination in log space, ``1 - SS(log t - log t_fit) / SS(log t -
        mean log t)``, the scale on which the fit is made (1 is a perfect fit).

    Raises
    ------
    ValueError
        Shapes differ, fewer than 2 distinct sizes, a size or time <= 0 or not finite, or times
        that do not grow with size (no positive ``beta`` fits).

    Examples
    --------
    >>> n = np.array([8, 1024, 2**20])
    >>> alpha_s, beta_Bps, r2 = fit_alpha_beta(n, 2e-6 + n / 5e9)
    >>> round(alpha_s * 1e6, 9), round(beta_Bps / 1e9, 9), round(r2, 9)
    (2.0, 5.0, 1.0)
    """
    n = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if n.ndim != 1 or n.shape != t.shape:
        raise ValueError(f"nbytes and seconds must be 1-d of one length, got shapes {n.shape} "
                         f"and {t.shape}")
    if len(np.unique(n)) < 2:
        raise ValueError(f"need at least 2 distinct message sizes, got {np.unique(n).tolist()}")
    if not (np.all(np.isfinite(n)) and np.all(n > 0)):
        raise ValueError("message sizes must be finite and > 0")
    if not (np.all(np.isfinite(t)) and np.all(t > 0)):
        raise ValueError("times must be finite and > 0")
    return _fit(n, t)


def _fit(n, t):
    from scipy.optimize import lsq_linear

    A = np.column_stack([1 / t, n / t])  # rows: (alpha + gamma n) / t = 1, gamma = 1 / beta
    scale = np.linalg.norm(A, axis=0)  # the columns differ by ~1e9: solve for scaled unknowns
    solution = lsq_linear(A / scale, np.ones_like(t), bounds=(0, np.inf), method="bvls")
    alpha_s, gamma = solution.x / scale
    if not gamma > 0:
        raise ValueError("the times do not grow with message size: no bandwidth fits them")
    residual = np.log(t) - np.log(alpha_s + gamma * n)
    spread = np.sum((np.log(t) - np.mean(np.log(t))) ** 2)
    r2 = 1.0 - np.sum(residual**2) / spread if spread > 0 else 1.0
    return float(alpha_s), float(1 / gamma), float(r2)


# ---------------------------------------------------------------------------- measuring
def _quiet_barrier(comm, poll_s=1e-3):
    """A barrier that sleeps while it waits (MPICH's Barrier spins a core). Collective."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(poll_s)


def _repetitions(nbytes, quick):
    """(passes, round trips per batch, warm-up round trips before each batch) for ``nbytes``:
    fewer for large messages, as OSU does."""
    passes = 12 if quick else 20
    if nbytes <= 64 * 1024:
        return passes, 20 if quick else 50, 10
    return (passes, 5, 2) if nbytes <= 2**20 else (passes, 3 if quick else 5, 1)


def _measure_network(comm, sizes, quick):
    """One-way seconds per size between ranks 0 and 1, on rank 0; None elsewhere. Collective:
    ranks >= 2 wait in a quiet barrier."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    seconds = None
    if pair != MPI.COMM_NULL:
        seconds = _ping_pong(pair, sizes, quick)
        pair.Free()
    _quiet_barrier(comm)
    return seconds if comm.rank == 0 else None


def _ping_pong(pair, sizes, quick):
    """One-way seconds of each size in ``sizes`` (bytes): the median over passes of a batch's
    mean round trip, halved. Rank 0 of ``pair`` times; each batch follows a barrier and a few
    warm-up round trips, discarded. Collective on the two-rank ``pair``.

    Two departures from timing one size after the other, one round trip at a time, both because
    a shared machine is noisy: (1) a batch's *mean* is taken, as OSU's timed loop does, since
    single round trips are bimodal here (one in three or four at a quarter of the speed, in a
    rhythm) and a median of them jumps between the modes from run to run; the mean holds the
    modes in their proportion, which is what a long run of messages costs. (2) The sizes are
    *interleaved*: every pass times one batch of each size, so a burst of load from another
    process spoils one batch of many sizes (which the median over passes drops) rather than
    every batch of one size (which would bend the fitted line).
    """
    buffers = [np.zeros(nbytes // 4, dtype=np.float32) for nbytes in sizes]
    plans = [_repetitions(nbytes, quick) for nbytes in sizes]
    means = np.full((max(plan[0] for plan in plans), len(sizes)), np.nan)
    for p in range(len(means)):
        for j, (buf, (passes, per_batch, warmup)) in enumerate(zip(buffers, plans, strict=True)):
            if p >= passes:
                continue
            pair.Barrier()  # both ranks are busy from here: a spinning barrier costs nothing
            for _ in range(warmup):
                _round_trip(pair, buf)
            t0 = time.perf_counter()
            for _ in range(per_batch):
                _round_trip(pair, buf)
            means[p, j] = (time.perf_counter() - t0) / per_batch
    return [float(x) / 2 for x in np.nanmedian(means, axis=0)]


def _round_trip(pair, buf):
    if pair.rank == 0:
        pair.Send(buf, dest=1, tag=_TAG)
        pair.Recv(buf, source=1, tag=_TAG)
    else:
        pair.Recv(buf, source=0, tag=_TAG)
        pair.Send(buf, dest=0, tag=_TAG)


def _measure_compute(models, X, y, dataset, quick):
    """Median seconds per sample of a training step for each model, with 1 BLAS thread."""
    with _one_blas_thread():
        return {name: _time_step(model, X, y, quick) / len(y) for name, model in models.items()}


def _time_step(model, X, y, quick):
    """Median seconds of one training step (gradient and Adam update) on the batch.

    Warm-up is by time, not count: the first tenth of a second or so runs up to 3x slower
    (caches, clock ramp-up, the other ranks settling into their wait). Then at least 10 (quick)
    or 30 timed repetitions and at least 0.2 s (quick) or 2 s of them, at most 2000."""
    grad = np.empty(model.n_params, dtype=model.dtype)
    X = np.ascontiguousarray(X, dtype=model.dtype)  # converted once, as the training loop does
    adam = make_optimizer("adam", model.n_params, lr=1e-6)  # tiny steps: the weights stay sane
    reps, warmup_s, budget_s = (10, 0.2, 0.2) if quick else (30, 1.0, 2.0)

    def step():
        model.loss_and_gradient(X, y, out=grad)
        adam.step(model.params, grad)

    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        step()
    times, start = [], time.perf_counter()
    while len(times) < reps or (time.perf_counter() - start < budget_s and len(times) < 2000):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


class _one_blas_thread:
    """Limit BLAS to one thread with threadpoolctl if it is installed; else the environment
    (``OPENBLAS_NUM_THREADS=1``, as the Makefile exports) decides, and a note says so."""

    def __enter__(self):
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            self._limits = None
            if os.environ.get("OPENBLAS_NUM_THREADS") != "1":
                print("note: threadpoolctl is not installed and OPENBLAS_NUM_THREADS is not 1: "
                      "BLAS may use several threads", file=sys.stderr)
            return self
        self._limits = threadpool_limits(limits=1, user_api="blas")
        return self

    def __exit__(self, *exc):
        if self._limits is not None:
            self._limits.restore_original_limits()


# ---------------------------------------------------------------------------- the profile
def _finish(args, hosts, sizes, seconds, per_model, work, started):
    """Fit, write the profile atomically, print the summary (rank 0)."""
    models, _, _, dataset = work
    fit = fit_alpha_beta(sizes, seconds)
    per_model = {name: _round(s) for name, s in per_model.items()}  # as written, so the file's
    flops = {name: model.flops_per_sample for name, model in models.items()}  # rate checks out
    rates = {name: 3 * flops[name] / per_model[name] for name in per_model}
    by_rate = sorted(per_model, key=rates.get)
    median_model = by_rate[(len(by_rate) - 1) // 2]  # the lower median: one model's own rate
    text = profile_text(
        host=socket.gethostname(), mpi=_mpi_library(), hosts=hosts, sizes=sizes,
        seconds=seconds, fit=fit, per_model=per_model, flops=flops, median_model=median_model,
        batch_size=args.batch_size, dataset=dataset.name, took_s=time.perf_counter() - started)
    _write_atomic(Path(args.out), text)
    print(_summary(fit, per_model, rates, median_model, args.out,
                   time.perf_counter() - started))


def profile_text(*, host, mpi, hosts, sizes, seconds, fit, per_model, flops, median_model,
                 batch_size, dataset, took_s):
    """The profile as TOML text (see the module docstring for its keys).

    ``hosts`` : one host name per rank; ``sizes`` bytes and ``seconds`` one-way times of the
    ping-pong; ``fit`` ``(alpha_s, beta_Bps, r2)``; ``per_model`` seconds per sample and ``flops``
    forward FLOPs per sample, by model name; ``took_s`` the calibration's wall time.
    """
    alpha_s, beta_Bps, r2 = fit
    where = ("ranks 0 and 1 on one host: shared memory, not a network" if hosts[0] == hosts[1]
             else f"rank 0 on {hosts[0]}, rank 1 on {hosts[1]}")
    stamp = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    rate = 3 * flops[median_model] / per_model[median_model]
    return "\n".join([
        f"# Written by python -m real.calibrate on {host} at {stamp} in {took_s:.1f} s;",
        "# measured, not edited: run it again to refresh. Network: OSU-style blocking ping-pong",
        "# between ranks 0 and 1, one-way = median over batches of the mean round trip / 2;",
        "# t(n) = alpha + n / beta fitted by least squares on relative residuals (r2 in log",
        "# space). Compute: one rank, 1 BLAS thread, median seconds of model.loss_and_gradient",
        "# on one batch after warm-up, divided by the batch size.",
        "",
        "[cluster]",
        f"name = {_string(f'this machine ({host})')}",
        "calibrated = true",
        f"source = {_string(f'python -m real.calibrate, {mpi}, {len(hosts)} ranks ({where})')}",
        f"cores = {os.cpu_count()}",
        "",
        "[network]",
        'topology = "star"',
        f"latency = {_string(_seconds_text(alpha_s))}",
        f"bandwidth = {_string(_bandwidth_text(beta_Bps))}",
        "",
        "[network.fit]  # the measured points: message bytes, one-way seconds",
        f"sizes = [{', '.join(str(n) for n in sizes)}]",
        f"seconds = [{', '.join(_float(t) for t in seconds)}]",
        f"r2 = {r2:.6f}",
        "",
        "[compute]",
        f"flops_per_s = {_float(rate)}  # 3 * flops_per_sample / seconds_per_sample, "
        f"{median_model} (median model)",
        f"seconds_per_sample = {_inline({m: _float(s) for m, s in per_model.items()})}",
        f"batch_size = {batch_size}",
        f"dataset = {_string(dataset)}",
        f"flops_per_sample = {_inline({m: str(f) for m, f in flops.items()})}  # forward",
        "",
    ])


def _write_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _summary(fit, per_model, rates, median_model, out, took_s):
    alpha_s, beta_Bps, r2 = fit
    models = ", ".join(f"{m} {s:.3g} s/sample ({rates[m] / 1e9:.2f} GFLOP/s)"
                       for m, s in per_model.items())
    return (f"network: alpha {_seconds_text(alpha_s)}, beta {_bandwidth_text(beta_Bps)} "
            f"(r2 {r2:.4f})\ncompute: {models}; flops_per_s {rates[median_model]:.3g} "
            f"({median_model})\nwrote {out} in {took_s:.1f} s")


def _mpi_library():
    """``MPICH 5.0.2``, ``Open MPI v4.1.5``: the library's name and version, one line."""
    first = MPI.Get_library_version().splitlines()[0]
    return " ".join(first.replace("Version:", "").split()).split(",")[0]


def _round(x, digits=4):
    """``x`` to ``digits`` significant digits."""
    return float(f"{x:.{digits - 1}e}")


def _float(x):
    """``x`` as a TOML float, 4 significant digits: ``1.468e-05``, ``2.769e+10``, ``100.0``."""
    text = f"{x:.4g}"
    return text if any(c in text for c in ".en") else f"{text}.0"


def _string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _inline(table):
    return "{ " + ", ".join(f"{key} = {value}" for key, value in table.items()) + " }"


def _seconds_text(seconds):
    """A time with a unit ``parse_seconds`` reads, 4 significant digits: ``1.234us``."""
    value, unit = (seconds * 1e6, "us") if seconds < 1e-3 else (seconds * 1e3, "ms")
    return f"{value:.4g}{unit}"


def _bandwidth_text(Bps):
    """A bandwidth with a unit ``parse_bandwidth_Bps`` reads, 4 significant digits: ``5.67GB/s``."""
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if Bps >= scale:
            return f"{Bps / scale:.4g}{prefix}B/s"
    return f"{Bps:.4g}B/s"


if __name__ == "__main__":
    sys.exit(main())
