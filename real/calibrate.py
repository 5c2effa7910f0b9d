"""``python -m real.calibrate``: measure a machine or cluster and write a profile for ``sim.run``.

Examples
--------
Two ranks on two hosts measure the network between them (on one host: shared memory)::

    mpiexec -n 2 -ppn 1 -hosts a,b python -m real.calibrate --out profiles/cluster.toml
    python -m real.cluster run -n 2 -- python -m real.calibrate --out runs/emulated.toml
    python -m sim.run --profile runs/emulated.toml --compute empirical ...
    python -m real.calibrate --from-run runs/some-run --out runs/emulated.toml   # no MPI needed

What is measured, and why so
----------------------------
- Network, the patterns the programs use (`real.netbench`): one-way ping-pong (Send/Recv),
  Sendrecv of n bytes each way (a ring step), an incast of every other rank into rank 0 (with 3
  ranks or more), and LogP's per-send overhead o, between rank 0 and a rank on another host
  (``MPI_Get_processor_name`` tells them apart; rank 1 when all share one). Sizes 8 B .. 64 MiB
  (``--quick``: powers of 4 to 2 MiB): the ghost models' gradients are 45-100 MB. Each of the
  first two gets a piecewise alpha-beta model (`calibration.costfit`) that reproduces every
  measured point within 5 %: one line cannot where a token bucket lets the first bytes through
  at line rate (a single line fitted 236 MB/s to a link shaped to 125 MB/s). The incast is
  compared with what the one-way model predicts on a star (k messages queued at one NIC), and
  that error is written down.
- The same two patterns in situ, 8 B .. 16 MiB (`real.netbench`): a compute step (the first
  model's gradient) before every message, the message cut from what it wrote; each size's
  median repetition is fitted, and the spread about it kept as jitter quantiles (from 64 KiB,
  ``[network.in_situ.jitter]``). That is what a
  training program pays (through shared memory here 1.4-1.7x the hot loop at 335 KB), and
  what ``sim.run`` charges its programs' messages; ``sim.osu`` keeps the hot models, as OSU's
  loops are hot. And the programs' own allreduce of 2 ranks, in situ (ring and mean, 64 KiB ..
  16 MiB): its second step, from the end of the first, less its add, is what a step of a
  program's collective right after another pays (``[network.in_situ.written.sendrecv]``, by
  the half's size: the loop, the call, bytes just written); what it pays past that and a
  Sendrecv of half its bytes timed just before it (at the machine's speed of that moment) is
  ``[compute.finish]``, the pass that makes the mean over bytes half just received and the
  passes around the messages (through token buckets: what it pays outside its MPI calls, past
  its add, and no next step; `allreduce_steps`).
  And a compressed message's wire bytes written before a send and read after a receive, in
  situ (``[network.in_situ.wire]``, `netbench.wire_in_situ`): Python work on every compressed
  message, 10x its hot-loop time inside a run. And the seconds an eager ``Send`` holds its
  sender, in situ, by size (``[network.in_situ.send]``, `netbench.eager_send`): over TCP the
  kernel copies the bytes into the socket (362 us at 670 KB between emulated 1 Gbit/s hosts,
  a hot 8-byte Send's o 5 us), which a program's eager Sends pay in place of o.
- How the machine's cores and memory behave with several processes at once
  (`real.machine_bench`): the turn a process gets on a core when more want the cores than
  there are (``[cluster] time_slice_s``): ``sim.run`` lets ranks past the cores take turns of
  it (`sim.cores`); how many copies the machine's memory moves at once at one copy's rate
  (``[cluster] memory_copies``): the ranks of a one-machine profile copy every message through
  it, and beyond it their messages queue; what a model's gradient takes more right after
  another process ran on its core (``[compute] switch_s``): a rank past the cores pays it when
  it is back on one; and a model's step in k processes at once (``[compute.busy.MODEL]``).
- On an allocation of several hosts with several ranks on rank 0's: a pair inside that host
  (``[network.memory]``: one copy's latency and bandwidth), its ranks sending to another host's
  all at once (``[network] nic_bandwidth``: the NIC they share), its ranks copying in pairs all
  at once (the memory's ``total_bandwidth``), ``[cluster] ranks_per_host``, and the allocation's
  own allreduce at every rank, written beside the profile as an OSU table
  (``FILE.osu_allreduce.txt``) to hold ``sim.osu`` against. Where its ranks are past the
  machine's cores over TCP (emulated hosts), that table's sizes below 64 KiB fit ``[cluster]
  poll_wait_s`` (``python -m sim.calibrate --profile``), in place of the pair timed beside
  polling ranks (kept as ``poll_wait_pair_s``).
- Compute, two ways. (1) The training step of each model timed in a hot loop on rank 0 (gradient
  and Adam update; seconds per sample for ``--compute profile``, and a FLOP rate for ghost
  models). (2) The real program: every rank runs ``real.train --algorithm allreduce`` for
  ``--train-steps`` steps of each model, in three windows spread over the calibration (this
  machine changes speed from second to second, 1.2-1.5x: one window of 120 steps, 0.3 s, met
  one speed; on 2026-12-01 its gradients took 0.83 ms in the median where the 48 runs of the
  validation after it took 1.02-1.17 ms), and the distribution of its gradients' seconds (the
  Compute operations its timeline.json records) goes into ``[compute.steps.MODEL]`` for
  ``--compute empirical``, which times each program's own code in process. Inside a run a step
  costs more than in the loop (2.55 ms against 1.40 ms for the MLP on two emulated hosts: caches
  evicted by MPI's copies, the program's own code, the other rank on the memory system), and a
  synchronous step waits for the slowest rank, so the spread matters as much as the median.
- ``--from-run RUN_DIR`` (one process, no MPI) takes the step times of any run folder instead and
  writes them into the profile ``--out``, which is created or updated in place.

The profile (read by ``sim.cluster_profile.load_profile``)::

    [cluster]   name, calibrated = true, source, cores, one_machine, hosts, time_slice_s,
                memory_copies, poll_wait_s (over TCP past the cores: fitted to the
                allocation's allreduce, else `netbench.beside_pollers`' pair), phase_us (on
                shared memory: the machine's phase before the hot tables, after the written
                ones and after the in-situ ones; on an allocation, its pair inside a host's
                before and after its table, `real.phase`; read by `analysis.validate` and
                `benchmarks/osu_twin.py`)
    [network]   topology = "star", latency (a small message's one-way time), bandwidth (the
                largest segment's), overhead_s (LogP's o), call_overhead_s (what each
                measured message holds once and a step inside one of MPI's own collectives
                does not: `netbench.call_overhead`), eager_bytes (the largest Send that
                returns before its receiver is there)
    [network.oneway], [network.sendrecv]   segments and measured points (`PiecewiseCost`)
    [network.written.oneway], [network.written.sendrecv]   the same hot, the bytes written
                       just before each (MPI's collectives' steps); not on token buckets
    [network.in_situ.oneway], [network.in_situ.sendrecv]   the same, in situ
    [network.in_situ.exchange]   gossip's exchange (Irecv, Isend, Waitall), in situ; not on
                       token buckets
    [network.in_situ.written.sendrecv]   a step of a program's collective right after another
                       (the ring's), by size, less its add; not on token buckets
    [network.in_situ.jitter]   min_bytes, oneway, sendrecv: per measured size (sizes),
                       101 quantiles of t / median (quantiles)
    [network.in_situ.wire]   write_s, write_s_per_byte, read_s: a compressed message's wire
                       bytes written and read, in situ (and the measured nbytes, times)
    [network.in_situ.send]   an eager Send's seconds in its sender by size, in situ
    [network.in_situ.probe]   how much later a program's Recv (probe first) takes a message
                       (`netbench.eager_send`; segments and points, `PiecewiseCost`)
    [network.incast]   ranks, sizes, seconds, predicted_s, max_rel_error
    [network.shaper]   on an emulated cluster (`real.cluster`): its token buckets per host,
                       rates_Bps and bursts_bytes as configured; on 3 hosts or more also
                       head_start_bytes, a fan-out's first flow ahead of the next at a
                       gradient's size (`netbench.fan_out_gap`, `head_start`)
    [network.stack]    there too: the kernel's CPU a TCP byte, send_s_per_byte and
                       recv_s_per_byte, from the compute each side's core lost beside a
                       transfer, with the busy time and each window pair's loss
                       (`real.stack_cpu`)
    [compute]   flops_per_s, seconds_per_sample = {mlp = .., cnn = ..}, seconds_per_step (the
                same keys: a step of b samples lasts seconds_per_step + b seconds_per_sample),
                seconds_per_update (the Adam update's part of seconds_per_step), switch_s
                (the same keys: a gradient's refill after another process), batch_size,
                dataset, flops_per_sample, gamma_s_per_byte (a reduction's add), cold_own_s
                and cold_own_bytes (own code right after a message of that size, over warm:
                `netbench.cold_own_code`), cold_own_code_s (the code it was paid over),
                reference_s (`calibration.pace`'s kernel around the compute measured: the
                simulator puts own code it times at this speed)
    [compute.reduction]   the add of n bytes into n, warm, by size (`local_times`)
    [compute.copy]     a copy of n bytes, warm, by size (`local_times`)
    [compute.copy_read_by_peer]   on shared memory: the same into bytes the other rank has
                       just read through the library (`netbench.copy_read_by_peer`)
    [compute.finish]   an in-situ allreduce's pay past its messages and add, by size
    [compute.busy.MODEL]   `BusyCores`: processes (k), factors (per k, 11 quantiles of one
                process's step over one alone's)
    [compute.steps.MODEL]   `StepTimes`: batch_size, steps, ranks, cores, quantiles_s

Exit status: 0 done; 2 bad input (one line on stderr from rank 0, every rank exits 2); 1 a bug (an
exception on any rank aborts the whole job, so nobody hangs). The file is written atomically
(`real.calibrate_text`, which also words the summary printed at the end).
"""

import contextlib
import csv
import io
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from functools import partial
from pathlib import Path

import numpy as np

from models import MODELS, build_model, make_optimizer
from models.threads import one_blas_thread
from real.calibrate_text import (
    bandwidth_text,
    five_digits,
    mpi_library,
    read_profile,
    rounded,
    seconds_text,
    step_times_text,
    summary_lines,
    where_text,
    write_profile,
)
from real.machine_bench import (
    busy_worker,
    finish_window,
    measure_busy_cores,
    measure_memory_copies,
    measure_switch_s,
    measure_time_slice,
    start_window,
    stop_workers,
    window,
)
from twinsgd.calibration.costfit import PiecewiseCost, fit_segments
from twinsgd.calibration.jitter import factor_quantiles
from twinsgd.calibration.pace import reference_seconds
from twinsgd.calibration.steptimes import (
    WARMUP_STEPS,
    read_run_events,
    step_times_from_run,
    step_times_from_runs,
)
from twinsgd.data import NAMES, DataError, load_dataset
from twinsgd.programs.collectives import combined_s
from twinsgd.programs.mpi_choices import library_for

logger = logging.getLogger(__name__)

# Message sizes, bytes: 8 B .. 4 MiB (--quick: powers of 4 to 2 MiB), past the largest message
# the programs send (the MLP gradient, 670 KB), short enough at 100 Mbit/s (4 MiB: 0.35 s)
SIZES = [2**k for k in range(3, 27)]  # 8 B .. 64 MiB: the ghost models' gradients are 45-100 MB
QUICK_SIZES = [8 * 4**k for k in range(10)]
LOCAL_SIZES = [1 << k for k in range(10, 25)]  # a copy's and an add's bytes: 1 KiB .. 16 MiB
GAMMA_MIN_BYTES = 2**16  # gamma and the in-situ allreduce: from 64 KiB
MIN_FINISH_S = 1e-7  # the finishing pass's floor, seconds (a residual may come out <= 0)
REFERENCE_REPEATS = 9  # the pace's kernel timed this often at each of three moments, fastest kept
JITTER_MIN_BYTES = 2**16  # the jitter's spread is of messages this large and larger
IN_SITU_MAX_BYTES = 2**24  # the in-situ patterns stop at 16 MiB (a compute step per message)
MAX_REL_ERROR = 0.05  # every measured point within 5 % of the fitted model
MAX_SEGMENTS = 6  # shared memory needed 5 to stay within it (protocol switches, caches)
FLAT_BPS = 1e18  # the "bandwidth" of a cost that does not grow with size: 1e-18 s a byte


def build_parser(parser_class=None):
    """The argument parser; errors are one line from rank 0 (`RankZeroParser`) unless another
    class is given (``--from-run`` runs as one process, without MPI)."""
    if parser_class is None:
        from real.cli import RankZeroParser as parser_class

    parser = parser_class(
        prog="python -m real.calibrate",
        description="Measure this machine or cluster under mpiexec -n 2 or more (network "
        "patterns between ranks, the training step of each model, a short run of "
        "the real program) and write a cluster profile (TOML) for python -m sim.run "
        "--profile. With --from-run, take the step times of a run folder instead.",
    )
    parser.add_argument(
        "--out",
        default="profiles/this-machine.toml",
        metavar="FILE",
        help="the profile to write (--from-run: to create or update) (default: %(default)s)",
    )
    parser.add_argument(
        "--dataset",
        default="mnist-subset",
        help=f"data the models are timed on: {', '.join(NAMES)} (default: %(default)s, bundled)",
    )
    parser.add_argument("--data-dir", metavar="D", help="folder holding <dataset>/ subfolders")
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help="comma-separated models to time (default: %(default)s)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=100, help="samples per timed step (default: %(default)s)"
    )
    parser.add_argument(
        "--train-steps",
        type=int,
        default=None,
        metavar="K",
        help="steps of the real program per model for the step-time "
        "distribution, in three windows (default 120, --quick 40; 0 skips it)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="fewer sizes, repetitions and steps (seconds, for tests; noisier)",
    )
    parser.add_argument(
        "--from-run",
        metavar="RUN_DIR",
        help="no measuring: write the step times of this run folder into --out",
    )
    parser.add_argument(
        "--from-osu",
        action="append",
        metavar="FILE[:RANKSxPER_HOST]",
        help="no measuring: fit a profile to a site's OSU/IMB tables (python -m sim.calibrate)",
    )
    return parser


def main(argv=None):
    one_blas_thread()  # as the ranks of a training run compute
    if argv is None:
        argv = sys.argv[1:]
    if "--from-run" in argv or any(a.startswith("--from-run=") for a in argv):
        return _from_run_main(argv)
    if "--from-osu" in argv or any(a.startswith("--from-osu=") for a in argv):
        # the fit simulates the tables, so it is the simulator's (real/ never imports sim/)
        return subprocess.call([sys.executable, "-m", "sim.calibrate", *argv])
    from real.mpi import MPI

    comm = MPI.COMM_WORLD
    parser = build_parser()
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if comm.size < 2:
        parser.error(
            f"needs at least 2 MPI ranks for the network, got {comm.size}: run it as "
            f"mpiexec -n 2 python -m real.calibrate (or --from-run RUN_DIR alone)"
        )
    try:
        if args.dataset not in NAMES:
            raise ValueError(f"--dataset must be one of {', '.join(NAMES)}, got {args.dataset!r}")
        args.models = _check_models(args.models)
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
        if args.train_steps is None:
            args.train_steps = 40 if args.quick else 120
        if args.train_steps < 0:
            raise ValueError(f"--train-steps must be >= 0, got {args.train_steps}")
        work = _prepare(args, comm)
    except (DataError, ValueError) as err:
        parser.error(str(err))
    try:
        measured = _measure(args, comm, work)
        if comm.rank == 0:
            _finish(args, measured, work, started)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)
    return 0


def _from_run_main(argv):
    from twinsgd.cli import OneLineParser

    parser = build_parser(OneLineParser)
    args = parser.parse_args(argv)
    try:
        times = step_times_from_run(args.from_run)
        document = read_profile(Path(args.out))
        _put_step_times(document, times)
        write_profile(Path(args.out), document)
    except ValueError as err:
        parser.error(str(err))
    print(f"compute: {times.model} {step_times_text(times)} from {args.from_run}\nwrote {args.out}")
    return 0


def _check_models(text):
    names = list(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    unknown = [m for m in names if m not in MODELS]
    if not names or unknown:
        raise ValueError(
            f"--models must be a comma-separated list of {', '.join(MODELS)}, got {text!r}"
        )
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
        logger.info(dataset.note)
    if args.batch_size > dataset.n_train:
        raise ValueError(
            f"--batch-size {args.batch_size} is larger than {dataset.name}'s "
            f"{dataset.n_train} training samples"
        )
    X, y = dataset.train_batch(np.arange(args.batch_size))
    models = {
        name: build_model(name, dataset.input_shape, dataset.n_classes, seed=0)
        for name in args.models
    }
    return models, X, y, dataset


# ---------------------------------------------------------------------------- measuring
def _measure(args, comm, work):
    """Every measurement, in an order that keeps them apart. Collective; the results on rank 0
    (a dict), None elsewhere."""
    from real import netbench
    from real.train import boot_id

    where = comm.gather((socket.gethostname(), boot_id()), root=0)
    # the pace's reference kernel on rank 0 around the compute measured (`calibration.pace`)
    references = [reference_seconds(REFERENCE_REPEATS)] if comm.rank == 0 else None
    per_model = _measure_compute(*work, args.quick) if comm.rank == 0 else None
    if comm.rank == 0:
        references.append(reference_seconds(REFERENCE_REPEATS))
    netbench.quiet_barrier(comm)  # the others wait here, sleeping, while rank 0 computes
    windows = [_step_window(args, 1)]  # the real program's steps: first of three
    sizes = QUICK_SIZES if args.quick else SIZES
    hosts, inter, intra = netbench.placement(comm)
    network = netbench.with_partner(comm, inter if inter is not None else 1)  # between hosts
    shaper = _emulated_shaper()  # an emulated cluster's token buckets, or None
    refill_s = _refill_s(shaper)  # each batch from full token buckets
    on_shared_memory = inter is None and shaper is None  # the pair: this machine's memory
    phases = [_phase_now(network, on_shared_memory)]
    oneway = netbench.ping_pong(network, sizes, args.quick, refill_s=refill_s)
    both_ways = netbench.exchange(network, sizes, args.quick, refill_s=refill_s)
    written = None  # the same with the bytes written just before (MPI's collectives' steps)
    if shaper is None:  # (token buckets: the simulator prices those flows alone)
        written = {
            "oneway": netbench.ping_pong(network, sizes, args.quick, rewrite=True),
            "sendrecv": netbench.exchange(network, sizes, args.quick, rewrite=True),
        }
    copy_read_by_peer = (  # MPI's first copy in OSU's loop: into bytes the other rank read
        netbench.copy_read_by_peer(network, LOCAL_SIZES[:: 2 if args.quick else 1], args.quick)
        if on_shared_memory
        else None
    )
    phases.append(_phase_now(network, on_shared_memory))
    in_situ_sizes = [n for n in sizes if n <= IN_SITU_MAX_BYTES]
    step = _in_situ_step(comm, work, max(in_situ_sizes) // 4)
    in_situ_samples = {"oneway": {}, "sendrecv": {}}  # every repetition's seconds, by size
    netbench.ping_pong(network, in_situ_sizes, args.quick, step, in_situ_samples["oneway"])
    netbench.exchange(network, in_situ_sizes, args.quick, step, in_situ_samples["sendrecv"])
    probe = netbench.probe_delay(network, in_situ_sizes, step, args.quick)  # a program's Recv
    if shaper is None:  # gossip's exchange (token buckets price flows alike)
        in_situ_samples["exchange"] = {}
        netbench.nonblocking_exchange(
            network, in_situ_sizes, args.quick, step, in_situ_samples["exchange"]
        )
    # the eager Send timed on the pair whose eager limit and o are measured (ranks 0 and 1)
    eager_bytes = comm.bcast(netbench.eager_limit(comm), root=0)
    eager_sizes = [n for n in in_situ_sizes if n <= eager_bytes]
    eager_send_s = (
        netbench.eager_send(comm, eager_sizes, step, args.quick, refill_s) if eager_sizes else None
    )
    allreduce_sizes = [n for n in in_situ_sizes if n >= GAMMA_MIN_BYTES]
    outside = {}  # by size: each repetition's seconds outside its MPI calls
    second = {}  # ... its second step, from the end of the first to its own end
    paired = {}  # ... less that and a Sendrecv of n/2 timed in the same repetition
    allreduce_s = netbench.allreduce_in_situ(
        network, allreduce_sizes, step, args.quick, outside, paired, second
    )
    phases.append(_phase_now(network, on_shared_memory))
    wire = netbench.wire_in_situ(comm, step, args.quick)
    call_overhead_s = netbench.call_overhead(network, library_for(mpi_library()))
    cold_bytes = comm.bcast(_gradient_bytes(work) if comm.rank == 0 else None, root=0)
    cold_own = netbench.cold_own_code(network, cold_bytes, args.quick)  # rank 0's, else None
    cold_own_s, cold_own_code_s = cold_own or (None, None)
    stack = _stack_cpu(args, network, work) if shaper is not None else None
    past = comm.bcast(_past_the_cores(where) if comm.rank == 0 else None, root=0)
    beside_pollers = netbench.beside_pollers(network, 8, args.quick) if past else None
    network.Free()
    windows.append(_step_window(args, 2))
    in_program = _wire_in_program(args, comm, args.models[0]) if args.train_steps else None
    allocation = (
        _measure_allocation(comm, hosts, inter, intra, args.quick)
        if inter is not None and intra is not None
        else None
    )
    incast_sizes = [n for n in sizes if n <= 2**22]  # k times the bytes: keep it short
    incast = netbench.incast(comm, incast_sizes, args.quick, refill_s)
    fan_out_gap_s = (  # 3 emulated hosts or more: a fan-out's head start, at a gradient's size
        netbench.fan_out_gap(comm, hosts, cold_bytes, refill_s=refill_s)
        if shaper is not None
        else None
    )
    overhead_s = netbench.send_overhead(comm)
    time_slice_s = measure_time_slice() if comm.rank == 0 else None
    memory_copies = measure_memory_copies(args.quick) if comm.rank == 0 else None
    switch_s = (
        {name: measure_switch_s(name, work[3], args.batch_size, args.quick) for name in args.models}
        if comm.rank == 0
        else None
    )
    busy = (
        {m: measure_busy_cores(m, work[3], args.batch_size, args.quick) for m in args.models}
        if comm.rank == 0
        else None
    )
    # the others sleep while rank 0's spinners take the cores, waking seldom: a rank that wakes
    # every millisecond cut the turns it measures to 1.1 ms
    netbench.quiet_barrier(comm, poll_s=0.05)
    windows.append(_step_window(args, 3))
    steps = (
        {name: _train_steps(args, comm, name, work, windows) for name in args.models}
        if args.train_steps
        else {}
    )
    if comm.rank != 0:
        return None
    references.append(reference_seconds(REFERENCE_REPEATS))
    return {
        "where": where,
        "per_model": per_model,
        "sizes": sizes,
        "oneway": oneway,
        "sendrecv": both_ways,
        "written": written,
        "copy_read_by_peer": copy_read_by_peer,
        "in_situ_sizes": in_situ_sizes,
        "in_situ_samples": in_situ_samples,
        "probe": probe,
        "allreduce_sizes": allreduce_sizes,
        "allreduce_s": allreduce_s,
        "allreduce_outside_s": [float(np.median(outside[n])) for n in allreduce_sizes],
        "allreduce_paired_s": [float(np.median(paired[n])) for n in allreduce_sizes],
        "allreduce_second_s": [float(np.median(second[n])) for n in allreduce_sizes],
        "wire": wire,
        "wire_in_program": in_program,
        "incast_sizes": incast_sizes,
        "incast": incast,
        "fan_out_gap_s": fan_out_gap_s,
        "fan_out_bytes": cold_bytes,
        "overhead_s": overhead_s,
        "eager_sizes": eager_sizes,
        "eager_send_s": eager_send_s,
        "call_overhead_s": call_overhead_s,
        "cold_own_s": cold_own_s,
        "cold_own_code_s": cold_own_code_s,
        "cold_own_bytes": cold_bytes,
        "stack": stack,
        "poll_wait": (*beside_pollers, past) if beside_pollers else None,
        "reference_s": float(np.median(references)),
        "eager_bytes": eager_bytes,
        "time_slice_s": time_slice_s,
        "memory_copies": memory_copies,
        "switch_s": switch_s,
        "busy": busy,
        "steps": steps,
        "ranks": comm.size,
        "allocation": allocation,
        # the phase around the tables of shared memory: the pair's, or an allocation's pair
        # inside a host's
        "phase_us": (
            phases
            if on_shared_memory
            else allocation["memory_phase_us"]
            if allocation is not None
            else None
        ),
    }


def _phase_now(pair, on_shared_memory):
    """The machine's phase now (`_pair_phase` of the measured pair) where that pair talks
    through this machine's shared memory, else None. Collective. Why here: the tables of bytes
    just written and the in-situ ones move 2-3x with the phase, and it can switch inside a
    calibration (`analysis.validate`'s probes around one both read 135 us where its written
    Sendrecv of 512 KiB came out 202 us against 69 in the fast phase)."""
    return _pair_phase(pair) if on_shared_memory else None


def _pair_phase(comm):
    """The machine's phase now (`real.phase.round_trip_us`) between ranks 0 and 1 of ``comm``
    alone, the others waiting asleep (spinning they would take the pair's cores); on rank 0,
    None elsewhere. Collective. Why: an allocation's pair inside a host copies through that
    machine's memory, which moves with the phase; on 2 emulated hosts x 2 ranks its one-way
    2 MiB came out 1,347 us in a calibration whose probes around it read fast, and 547 by hand
    minutes later (2026-12-05)."""
    from mpi4py import MPI

    from real.netbench import quiet_barrier
    from real.phase import round_trip_us

    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    us = None
    if pair != MPI.COMM_NULL:
        us = round_trip_us(pair)
        pair.Free()
    quiet_barrier(comm)
    return us


def _gradient_bytes(work):
    """Bytes of the first model's gradient (what the programs move a step), on rank 0."""
    model = next(iter(work[0].values()))
    return model.n_params * np.dtype(model.dtype).itemsize


def _in_situ_step(comm, work, elements):
    """The compute step the in-situ patterns run between messages (`real.netbench`): the first
    model's gradient on the calibration's batch, written into the head of a float32 buffer of
    at least ``elements`` that the step returns (messages are cut from it), on every rank
    (each builds the model, seeded alike; the batch comes from rank 0). Collective."""
    if comm.rank == 0:
        models, X, y, _ = work
        name, model = next(iter(models.items()))
        shape = (name, model.input_shape, model.n_classes)
    else:
        shape = X = y = None
    name, input_shape, n_classes = comm.bcast(shape, root=0)
    X, y = comm.bcast((X, y), root=0)
    model = build_model(name, input_shape, n_classes, seed=0)
    X = np.ascontiguousarray(X, dtype=model.dtype)
    written = np.zeros(max(elements, model.n_params), dtype=model.dtype)
    gradient = written[: model.n_params]

    def step():
        model.loss_and_gradient(X, y, out=gradient)
        return written

    return step


def _measure_allocation(comm, hosts, inter, intra, quick):
    """On an allocation of several hosts with several ranks on rank 0's: a pair inside that host
    (its memory path), that host's ranks sending to another host's all at once (its NIC
    shared), pairs of its ranks copying all at once (its memory shared), and the allocation's
    own allreduce at every rank (OSU's method). Collective; a dict on rank 0."""
    from real import netbench

    sizes = QUICK_SIZES if quick else SIZES
    memory = netbench.with_partner(comm, intra)
    memory_phase_us = [_pair_phase(memory)]
    memory_oneway = netbench.ping_pong(memory, sizes, quick)
    memory_phase_us.append(_pair_phase(memory))
    memory.Free()
    mine = [r for r, h in enumerate(hosts) if h == hosts[0]]
    theirs = [r for r, h in enumerate(hosts) if h == hosts[inter]]
    shared_sizes = [2**k for k in (16, 20)] if quick else [2**k for k in (16, 18, 20, 22, 24)]
    pairs = list(zip(mine, theirs, strict=False))
    nic = netbench.shared_rate(comm, pairs, shared_sizes, quick)
    copies = list(zip(mine[0::2], mine[1::2], strict=False))
    memory_total = netbench.shared_rate(comm, copies, shared_sizes, quick)
    from real.osu import measure  # OSU's method, as real.osu measures a table

    collective_sizes = [4**k for k in range(1, 11)] if quick else [2**k for k in range(2, 23)]
    scale = 0.002 if quick else 0.01  # of OSU's iteration counts: a shared allocation
    allreduce = [measure(comm, "osu_allreduce", n, scale) for n in collective_sizes]
    if comm.rank != 0:
        return None
    return {
        "ranks": comm.size,
        "ranks_per_host": len(mine),
        "memory_sizes": sizes,
        "memory_oneway": memory_oneway,
        "memory_phase_us": memory_phase_us,
        "nic_Bps": _marginal_rate([len(pairs) * n for n in shared_sizes], nic),
        "nic_senders": min(len(mine), len(theirs)),
        "memory_total_Bps": max(memory_total),
        "memory_copies": len(copies),
        "allreduce_sizes": collective_sizes,
        "allreduce_us": allreduce,
    }


def _marginal_rate(nbytes, rates):
    """Bytes a second of the bytes past the smallest transfer: the inverse of the least-squares
    slope of seconds (``nbytes / rates``) over ``nbytes``; the largest rate where the slope is
    not positive (noise on a flat curve).

    Why not the largest rate: a token bucket (an emulated host's ``tc tbf``, `netns`) lets a
    burst pass at the veth's speed, so two senders' 64 KiB, inside 1 Gbit/s's 125 KB bucket
    refilled between repetitions, came out at 254 MB/s, twice the link; their 1 MiB at 152.
    The slope leaves the burst, a constant, out, as it leaves a fixed latency.

    >>> _marginal_rate([2e5, 2e6], [400e6, 160e6])  # 0.5 ms, 12.5 ms: 1.8 MB in 12 ms
    150000000.0
    """
    seconds = [n / r for n, r in zip(nbytes, rates, strict=True)]
    slope = np.polyfit(nbytes, seconds, 1)[0] if len(nbytes) > 1 else 0.0
    return float(1.0 / slope) if slope > 0 else float(max(rates))


STEP_WINDOWS = 3  # the real program's steps, in windows spread over the calibration


def _step_window(args, k):
    """Window ``k`` of `STEP_WINDOWS`: ``real.train --algorithm allreduce`` of each model for
    its share of ``--train-steps`` (each rank's first `WARMUP_STEPS` are dropped: at least one
    more), the last window's run folder ``STEM.steps-MODEL`` beside the profile, the others'
    ``STEM.stepsK-MODEL``. Collective; ``{model: (argv, run folder)}`` (empty with no steps)."""
    if not args.train_steps:
        return {}
    steps = max(WARMUP_STEPS + 1, -(-args.train_steps // STEP_WINDOWS))
    kind = "steps" if k == STEP_WINDOWS else f"steps{k}"
    return {model: _run_beside(args, model, kind, steps=steps) for model in args.models}


def _train_steps(args, comm, model, work, windows):
    """On rank 0 the `StepTimes` of ``model``'s steps in every window (`_step_window`),
    pooled, with the program's own code timed alone after the last (``work``: what `_prepare`
    loaded there); None elsewhere. Collective."""
    if comm.rank != 0:
        return None
    argv, _ = windows[-1][model]
    own_alone_s = _own_code_alone(argv, dataset=work[3])
    return step_times_from_runs([window[model][1] for window in windows], own_alone_s=own_alone_s)


def _wire_in_program(args, comm, model):
    """A compressed message's wire bytes written, gathered and read inside the real program
    (top-k 1 % with error feedback, its allgather; ``--train-steps`` steps of ``model``), run
    beside the profile. On rank 0 ``(message bytes, median write s, median read s a message,
    median allgather s)`` from its timeline's ``write wire``, ``read wire`` and ``allgather``
    events; None elsewhere. Collective."""
    _, run_dir = _run_beside(args, model, "wire", "--compress", "topk:0.01", "--error-feedback")
    if comm.rank != 0:
        return None
    writes, reads, gathers = (
        read_run_events(run_dir, name) for name in ("write wire", "read wire", "allgather")
    )
    with open(run_dir / "steps.csv") as f:
        row = next(csv.DictReader(f))
    nbytes = int(row["bytes_sent"]) // max(1, comm.size - 1)
    return (
        nbytes,
        float(np.median(writes)),
        float(np.median(reads)) / max(1, comm.size - 1),
        float(np.median(gathers)),
    )


def _run_beside(args, model, kind, *flags, steps=None):
    """``real.train --algorithm allreduce`` of ``model`` for ``steps`` (``--train-steps``)
    steps with ``flags``, its run folder ``STEM.KIND-MODEL`` beside the profile
    (``--overwrite``: a calibration again to the same ``--out`` renews it). Collective; returns
    (argv, folder)."""
    from real import train

    out = Path(args.out)
    run_dir = out.with_name(f"{out.stem}.{kind}-{model}")
    steps = steps or args.train_steps
    argv = [
        *("--algorithm", "allreduce", *flags),
        *("--model", model, "--dataset", args.dataset, "--batch-size", str(args.batch_size)),
        *("--iterations", str(steps), "--eval-every", str(steps)),
        *("--no-progress", "--overwrite", "--out", str(run_dir)),
        *(("--data-dir", args.data_dir) if args.data_dir else ()),
    ]
    with contextlib.redirect_stdout(io.StringIO()):  # its one-line report is not ours
        status = train.main(argv)
    if status != 0:
        raise RuntimeError(f"the calibration's {kind} run of {model} ended with {status}")
    return argv, run_dir


def _own_code_alone(argv, dataset):
    """Seconds per step of the program's own code (all its compute but the gradient's) when
    it runs alone in this process with nothing else going on, as the simulator times it: the
    mean over its steps after each rank's first `WARMUP_STEPS`, as the runs' ``own_s`` is
    read. (Divided by the three windows' steps where one window's ran, it was a third of
    this before 2026-12-05.)"""
    from real.backend import Driver
    from twinsgd.programs import attach_optimizer, make_node, node_program
    from twinsgd.run.config import parse_config
    from twinsgd.run.runfolder import RunFolder
    from twinsgd.run.runlog import RunLog, run_header

    cfg = parse_config(argv)
    model = build_model(cfg.model, dataset.input_shape, dataset.n_classes, seed=cfg.seed)
    node = make_node(0, 1, cfg, dataset, model)
    attach_optimizer(node)
    with tempfile.TemporaryDirectory() as folder:
        log = RunLog(
            RunFolder(folder),
            run_header(cfg, dataset, model, 1, "wall", "real.calibrate", mpi=None),
        )
        driver = Driver(node, log, None, measure_wait=False)
        driver.run(node_program(cfg)(node))
        log.steps.close()  # its rows on disk, its file closed
        with open(Path(folder) / "steps.csv") as f:
            compute = np.array([float(row["compute_s"]) for row in csv.DictReader(f)])
    gradients = np.array(
        [end - start for name, _, start, end in driver.events if name == "compute"]
    )
    own = (compute - gradients)[WARMUP_STEPS:]  # one gradient a step (allreduce SGD)
    return max(0.0, float(np.mean(own))) if own.size else 0.0


def _measure_compute(models, X, y, dataset, quick):
    """Each model's training step as ``(seconds per step, seconds per sample, seconds of the
    update)``, with 1 BLAS thread: the gradient timed at `batch_sizes` of the batch and fitted
    (`fit_step_cost`), and the Adam update (the same at every batch) added to its fixed part."""
    sizes = batch_sizes(len(y))
    measured = {}
    for name, model in models.items():
        gradients, update_s = _time_steps(model, X, y, sizes, quick)
        per_step, per_sample = fit_step_cost(sizes, gradients)
        measured[name] = (rounded(per_step + update_s), per_sample, rounded(update_s))
    return measured


def batch_sizes(batch):
    """The batch sizes a model's step is timed at: a quarter, a half and all of ``batch``."""
    return sorted({max(1, batch // 4), max(1, batch // 2), batch})


def fit_step_cost(sizes, seconds):
    """Fit ``t(b) = per_step + b * per_sample`` to step times ``seconds`` at batch ``sizes`` (least
    squares); ``(per_step, per_sample)`` in seconds, neither negative.

    Why not ``t(B) / B``: a step costs a part that does not grow with the batch (the calls'
    overhead, and the optimizer's update of every weight): on this machine the MLP's gradient is
    0.44 ms plus 10 us a sample and Adam's update 0.4 ms, three quarters of a step at batch 32.
    Charging per sample alone made a run at batch 32 on a profile calibrated at 100 too fast:
    its worker computed 0.59 ms a step simulated against 0.81-0.97 ms measured.

    >>> fit_step_cost([25, 50, 100], [1.5e-3, 2.0e-3, 3.0e-3])
    (0.001, 2e-05)
    """
    b, t = np.asarray(sizes, float), np.asarray(seconds, float)
    if len(set(sizes)) > 1:
        per_sample, per_step = np.polyfit(b, t, 1)
        if per_step >= 0 and per_sample > 0:
            return rounded(per_step), rounded(per_sample)
    return 0.0, rounded(float(np.dot(b, t) / np.dot(b, b)))  # through the origin: per sample


def _time_steps(model, X, y, sizes, quick):
    """A training step on the first b samples of the batch, for each b of ``sizes``: (median
    seconds of its gradient at each size, median seconds of its Adam update over all of them).

    The sizes take turns, a step each, so that the machine's drift (this one's step time moves
    by tens of percent over minutes) falls on all of them alike and leaves the fitted slope
    alone. Warm-up is by time, not count: the first tenth of a second or so runs up to 3x
    slower (caches, clock ramp-up, the other ranks settling into their wait). Then at least 10
    (quick) or 30 rounds and at least 0.6 s (quick) or 3 s of them, at most 2000."""
    grad = np.empty(model.n_params, dtype=model.dtype)
    X = np.ascontiguousarray(X, dtype=model.dtype)  # converted once, as the training loop does
    batches = [(X[:b], y[:b]) for b in sizes]
    adam = make_optimizer("adam", model.n_params, lr=1e-6)  # tiny steps: the weights stay sane
    reps, warmup_s, budget_s = (10, 0.2, 0.6) if quick else (30, 1.0, 3.0)

    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        for Xb, yb in batches:
            model.loss_and_gradient(Xb, yb, out=grad)
            adam.step(model.params, grad)
    gradients, updates, start = [[] for _ in sizes], [], time.perf_counter()
    while len(updates) < reps * len(sizes) or (
        time.perf_counter() - start < budget_s and len(updates) < 2000 * len(sizes)
    ):
        for (Xb, yb), timed in zip(batches, gradients, strict=True):
            t0 = time.perf_counter()
            model.loss_and_gradient(Xb, yb, out=grad)
            t1 = time.perf_counter()
            adam.step(model.params, grad)
            timed.append(t1 - t0)
            updates.append(time.perf_counter() - t1)
    return [float(np.median(t)) for t in gradients], float(np.median(updates))


# ---------------------------------------------------------------------------- the profile
def _finish(args, measured, work, started):
    """Fit, write the profile atomically, print the summary (rank 0)."""
    models, _, _, dataset = work
    sizes = measured["sizes"]
    measured["gamma"] = float(f"{reduction_gamma(args.quick):.4g}")
    reduction = fit_segments(*local_times(_add, args.quick), MAX_REL_ERROR, MAX_SEGMENTS)
    measured["reduction_call_s"] = python_call_s(_add)  # the program's, not the library's
    copy_call_s = python_call_s(np.copyto)  # the library copies in C: off both copies' times
    copied = local_times(np.copyto, args.quick, call_s=copy_call_s)
    copy = fit_segments(*copied, MAX_REL_ERROR, MAX_SEGMENTS)
    measured["reduction"], measured["copy"] = reduction, copy
    copy_read_by_peer = None
    if measured.get("copy_read_by_peer") is not None:  # on shared memory
        seconds = [max(t - copy_call_s, 1e-9) for t in measured["copy_read_by_peer"]]
        copy_read_by_peer = fit_segments(copied[0], seconds, MAX_REL_ERROR, MAX_SEGMENTS)
    oneway = fit_segments(sizes, measured["oneway"], MAX_REL_ERROR, MAX_SEGMENTS)
    sendrecv = fit_segments(sizes, measured["sendrecv"], MAX_REL_ERROR, MAX_SEGMENTS)
    written = {
        pattern: fit_segments(sizes, seconds, MAX_REL_ERROR, MAX_SEGMENTS)
        for pattern, seconds in (measured["written"] or {}).items()
    }
    in_situ = {  # the median repetition per size; the spread about it is the jitter
        pattern: fit_segments(
            measured["in_situ_sizes"],
            [float(np.median(samples[n])) for n in measured["in_situ_sizes"]],
            MAX_REL_ERROR,
            MAX_SEGMENTS,
        )
        for pattern, samples in measured["in_situ_samples"].items()
    }
    left_out = measured["jitter_left_out"] = {p: {} for p in measured["in_situ_samples"]}
    jitter = {
        pattern: factor_quantiles(samples, JITTER_MIN_BYTES, left_out[pattern])
        for pattern, samples in measured["in_situ_samples"].items()
    }
    shaper = _emulated_shaper()
    past_steps, next_step = allreduce_steps(measured, reduction, emulated=shaper is not None)
    in_situ_written = (  # a step of a program's collective right after another
        {"sendrecv": fit_segments(*next_step, MAX_REL_ERROR, MAX_SEGMENTS)} if next_step else {}
    )
    finish = fit_segments(*past_steps, MAX_REL_ERROR, MAX_SEGMENTS)
    incast = _incast_check(measured, oneway)
    per_step = {name: step for name, (step, _, _) in measured["per_model"].items()}
    per_model = {name: sample for name, (_, sample, _) in measured["per_model"].items()}
    per_update = {name: update for name, (_, _, update) in measured["per_model"].items()}
    flops = {name: model.flops_per_sample for name, model in models.items()}
    rates = {name: 3 * flops[name] / per_model[name] for name in per_model}
    by_rate = sorted(per_model, key=rates.get)
    median_model = by_rate[(len(by_rate) - 1) // 2]  # the lower median: one model's own rate
    hosts = [host for host, _ in measured["where"]]
    one_machine = len({boot for _, boot in measured["where"]}) == 1
    document = {
        "cluster": {
            "name": f"measured from {hosts[0]}"
            + (f" and {hosts[1]}" if hosts[1] != hosts[0] else ""),
            "calibrated": True,
            "source": f"python -m real.calibrate, {mpi_library()}, {measured['ranks']} ranks "
            f"({where_text(hosts, one_machine)})",
            "cores": os.cpu_count() or 1,
            "mpi": library_for(mpi_library()),  # whose choices --allreduce mpi simulates
            "one_machine": one_machine,
            "hosts": hosts,
            **(
                {"time_slice_s": float(f"{measured['time_slice_s']:.4g}")}
                if measured["time_slice_s"]
                else {}
            ),
            "memory_copies": rounded(measured["memory_copies"], 3),
            **(
                {"phase_us": [round(p, 1) for p in measured["phase_us"]]}
                if measured.get("phase_us")
                else {}
            ),
            **(
                {"poll_wait_s": float(f"{poll_wait_s(measured['poll_wait']):.4g}")}
                if measured.get("poll_wait")
                else {}
            ),
        },
        "network": {
            "topology": "star",
            "latency": seconds_text(float(oneway.seconds(8))),
            "bandwidth": bandwidth_text(float(oneway.beta_Bps(sizes[-1]))),
            "overhead_s": float(f"{measured['overhead_s']:.4g}"),
            "call_overhead_s": float(f"{measured['call_overhead_s']:.4g}"),
            "eager_bytes": int(measured["eager_bytes"]),
            "oneway": oneway.to_dict(),
            "sendrecv": sendrecv.to_dict(),
            **({"written": {p: c.to_dict() for p, c in written.items()}} if written else {}),
            "in_situ": {
                **{pattern: cost.to_dict() for pattern, cost in in_situ.items()},
                **(
                    {"written": {p: c.to_dict() for p, c in in_situ_written.items()}}
                    if in_situ_written
                    else {}
                ),
                "jitter": {
                    "min_bytes": JITTER_MIN_BYTES,
                    **{pattern: spread for pattern, spread in jitter.items() if spread},
                },
                "wire": wire_cost(
                    *measured["wire"], in_program=measured["wire_in_program"], pair=in_situ
                ),
                **(
                    {"send": eager_send_cost(measured["eager_sizes"], measured["eager_send_s"])}
                    if len(measured["eager_sizes"]) >= 2
                    else {}
                ),
                **(
                    {"probe": probe_cost(measured["in_situ_sizes"], measured["probe"])}
                    if measured.get("probe")
                    else {}
                ),
            },
        },
        "compute": {
            "flops_per_s": float(f"{rates[median_model]:.4g}"),
            "seconds_per_sample": per_model,
            "seconds_per_step": per_step,
            "seconds_per_update": per_update,
            "switch_s": {
                name: rounded(x) for name, x in measured["switch_s"].items() if x is not None
            },
            "busy": {name: busy.to_dict() for name, busy in measured["busy"].items()},
            "batch_size": args.batch_size,
            "dataset": dataset.name,
            "input_shape": list(dataset.input_shape),  # what the steps were timed on
            "flops_per_sample": flops,
            "gamma_s_per_byte": measured["gamma"],
            "cold_own_s": rounded(measured["cold_own_s"]),
            "cold_own_bytes": int(measured["cold_own_bytes"]),
            "cold_own_code_s": rounded(measured["cold_own_code_s"]),
            "reference_s": rounded(measured["reference_s"]),
            "reduction": {**reduction.to_dict(), "call_s": rounded(measured["reduction_call_s"])},
            "copy": copy.to_dict(),
            **({"copy_read_by_peer": copy_read_by_peer.to_dict()} if copy_read_by_peer else {}),
            "finish": finish.to_dict(),
        },
    }
    if incast is not None:
        document["network"]["incast"] = incast
    if shaper is not None:
        document["network"]["shaper"] = shaper
        if measured.get("fan_out_gap_s") is not None:
            shaper.update(head_start(measured["fan_out_gap_s"], measured["fan_out_bytes"], shaper))
    if measured["stack"] is not None:
        document["network"]["stack"] = {
            "source": "real.stack_cpu: compute lost on each core while ranks 0 and 1 move "
            "bytes, the sender's core's and the others'",
            **{
                key: five_digits(x) if isinstance(x, float) else x
                for key, x in measured["stack"].items()
            },
        }
    for times in measured["steps"].values():
        _put_step_times(document, times)
    allocation = measured["allocation"]
    if allocation is not None:
        _put_allocation(document, allocation)
    write_profile(Path(args.out), document, took_s=time.perf_counter() - started)
    if allocation is not None:
        table = _write_allreduce_table(args.out, allocation)
        print(_allocation_summary(allocation, table, args.out))
        if measured.get("poll_wait"):
            _fit_poll_wait(args.out, table, allocation)
    print(
        summary_lines(
            oneway,
            sendrecv,
            in_situ,
            jitter,
            finish,
            incast,
            measured,
            rates,
            median_model,
            args.out,
            time.perf_counter() - started,
            JITTER_MIN_BYTES,
        )
    )


def _past_the_cores(where):
    """Ranks past this machine's cores where all the ranks run on it over emulated hosts (they
    talk over TCP, `sim.cores.Pollers`), else 0. ``where``: (host, boot id) of every rank."""
    one_machine = len({boot for _, boot in where}) == 1
    if not one_machine or _emulated_shaper() is None:
        return 0
    return max(0, len(where) - (os.cpu_count() or 1))


def poll_wait_s(measured):
    """``[cluster] poll_wait_s`` from `netbench.beside_pollers`' (asleep s, polling s) and the
    ranks then past the cores: the one-way time polling adds, over them (at least 0)."""
    asleep_s, polling_s, past = measured
    return max(0.0, polling_s - asleep_s) / past


def _stack_cpu(args, pair, work):
    """`real.stack_cpu.stack_cpu` over ``pair``, its compute windows the first model's steps
    in a process pinned to each core of this machine (rank 0). Collective; the result on rank
    0."""
    from real.stack_cpu import stack_cpu

    if pair.rank != 0:
        return stack_cpu(pair, args.quick)
    cpus = sorted(os.sched_getaffinity(0))  # one process pinned to each, in `stack_cpu`'s order
    model = args.models[0]
    workers = [busy_worker(model, work[3], args.batch_size, i, c) for i, c in enumerate(cpus)]
    try:
        window(workers, 0.1)  # every process warm
        windows = (partial(start_window, workers), partial(finish_window, workers))
        return stack_cpu(pair, args.quick, windows)
    finally:
        stop_workers(workers)


def allreduce_steps(measured, gamma, emulated):
    """What the programs' allreduce of 2 ranks in situ (`netbench.allreduce_in_situ`) gives
    the simulator, as (sizes, seconds) to fit: ``[compute.finish]``, what it pays past its
    steps and its add (the division into the mean over bytes half just received, the passes
    around the messages), charged once an allreduce of a mean whatever the rank count; and
    ``[network.in_situ.written.sendrecv]``, a step of a program's collective right after
    another (by the half's size, less its add: the simulator adds it), or None.

    On shared memory or a real network the first step is priced as the in-situ Sendrecv, and
    every later one as the second step measured here: its loop, the call, its bytes just
    written. On a 16-core Xeon (2026-12-04) a 16-rank ring's steps of 42 KB took 24-30 us
    each, where the in-situ Sendrecv (a compute step before it) cost 34-38 us; with every step
    charged at that, the ring's communication came out 34-37 % too slow at 16 ranks and
    14-19 % at 8 (docs/validation.md). The finishing pass is the allreduce less both, each
    timed in the same repetition (the machine's speed moves 1.4-1.6x within seconds here).

    Through token buckets (``emulated``), where the simulator prices the messages by the
    buckets' state, the finishing pass is the seconds spent outside its MPI calls less the
    add, and there is no next step: the second step starts on the buckets the first drained,
    which the in-situ Sendrecv (its buckets refilled by a compute step) never sees, so a
    remainder past the messages would charge the drain twice (on 2 emulated 1 Gbit/s hosts 0.9
    ms of a 670 KB allreduce's 4.9, against 0.1-0.2 ms of work outside MPI)."""
    sizes = measured["allreduce_sizes"]
    halves = [n // 2 for n in sizes]
    if emulated:
        rest = less_add(halves, measured["allreduce_outside_s"], gamma)
        return (sizes, growing(sizes, rest)), None
    next_s = less_add(halves, measured["allreduce_second_s"], gamma)
    return (sizes, growing(sizes, measured["allreduce_paired_s"])), (
        halves,
        growing(halves, next_s),
    )


def less_add(halves, seconds, gamma):
    """``seconds`` by size less the add of a received half of ``halves`` bytes, as the
    simulator charges it (gamma a byte or a cost by size, `combined_s`)."""
    return [float(t - combined_s(gamma, h)) for h, t in zip(halves, seconds, strict=True)]


def growing(sizes, seconds):
    """``seconds`` by size (ascending) made fit for a cost model: each at least `MIN_FINISH_S`
    (a residual may come out <= 0), never less than at a smaller size (the running maximum),
    plus 1e-15 s a byte so that every segment fitted to it has a bandwidth > 0.

    >>> [round(t, 12) for t in growing([1000, 2000, 4000], [8e-6, 5e-6, -1.0])]
    [8.000001e-06, 8.000002e-06, 8.000004e-06]
    """
    floored = np.maximum.accumulate([max(MIN_FINISH_S, float(t)) for t in seconds])
    return [float(t + 1e-15 * n) for n, t in zip(sizes, floored, strict=True)]


def eager_send_cost(nbytes, seconds):
    """``[network.in_situ.send]``: the seconds an eager ``Send`` holds its sender, by size
    (`netbench.eager_send`), as alpha-beta segments (`fit_segments`; the table keeps the
    points). Where they do not grow with size (through shared memory, where the eager limit
    is a few KiB), one segment of their median and no per-byte cost.

    >>> [round(b) for b in eager_send_cost([1000, 2000, 4000], [2e-6, 3e-6, 5e-6])["bandwidth_Bps"]]
    [1000000000]
    >>> eager_send_cost([8, 64, 512], [1e-6, 1e-6, 1e-6])["latency_s"]
    [1e-06]
    """
    try:
        cost = fit_segments(nbytes, seconds, MAX_REL_ERROR, MAX_SEGMENTS)
    except ValueError:  # times that do not grow with size: no bandwidth to fit
        median = float(np.median(seconds))
        flat = PiecewiseCost.constant(median, FLAT_BPS).to_dict()
        residuals = [float(median / t - 1) for t in seconds]
        return {
            **flat,
            "max_rel_residual": [max(abs(r) for r in residuals)],
            "sizes": list(nbytes),
            "seconds": list(seconds),
            "rel_residuals": residuals,
        }
    return cost.to_dict()


def probe_cost(nbytes, times):
    """``[network.in_situ.probe]``: a program's receive of a message it waited for, which waits
    in `real.backend.probe` and then takes it with ``Recv``, by size, from
    `netbench.probe_delay`'s medians (``times``: (plain s, probed s, taken s) per size of
    ``nbytes``): ``later``, how much later it is done than with ``Recv`` alone (probed less
    plain), and ``seen``, when its probe sees the message after it began to move (probed less
    its ``Recv`` after the probe: the real clock's wait ends there). Each ``a + b n`` (a, b >= 0,
    least squares): the differences are small beside the machine's noise, which a closer fit
    would follow.

    >>> cost = probe_cost([8, 8192, 655360], [(1e-5, 1.5e-5, 2e-6), (2e-5, 2.6e-5, 5e-6),
    ...                                        (1.3e-4, 1.6e-4, 1.2e-4)])
    >>> round(cost["later"]["latency_s"][0] * 1e6, 2), round(cost["seen"]["latency_s"][0] * 1e6, 2)
    (5.34, 16.83)
    """
    n = np.asarray(nbytes, float)
    plain, probed, taken = (np.array(column) for column in zip(*times, strict=True))
    return {"later": _line(n, probed - plain), "seen": _line(n, probed - taken)}


def _line(nbytes, seconds):
    """``a + b n`` through (nbytes, seconds), a and b >= 0, least squares, as a one-segment
    `PiecewiseCost`'s dict (b = 0: a flat cost)."""
    from scipy.optimize import lsq_linear

    design = np.column_stack([np.ones_like(nbytes), nbytes])
    a, b = (float(x) for x in lsq_linear(design, seconds, bounds=(0.0, np.inf)).x)
    return PiecewiseCost.constant(a, 1.0 / b if b > 0 else FLAT_BPS).to_dict()


def wire_cost(nbytes, write_s, read_s, in_program=None, pair=None):
    """``[network.in_situ.wire]``: a compressed message's wire bytes written, ``write_s +
    write_s_per_byte n`` (the copy grows with n), and read, ``read_s`` (views), keeping the
    times it comes from. The per-byte slope is `netbench.wire_in_situ`'s (1-262 KB); the
    rest is the real program's own (``in_program``: message bytes, median write and read
    seconds and median allgather seconds from its timeline), where given, else the pattern's
    medians: inside a run they were 2-4x the pattern's here.

    ``allgather_extra_s``: what MPI's Allgather of those bytes took inside the 2-rank program past
    the one exchange it makes there, as ``pair["sendrecv"]`` (the in-situ Sendrecv model)
    prices it; at least 0. The simulator charges it once an allgather of compressed messages.
    Three calibrations on shared memory: 94-115 us, against 41-45 us for that Sendrecv of 13
    KB (2026-12-02; the 30-50 us of extra cold work in the call is not found).

    >>> wire_cost([1000, 3000], [2e-6, 4e-6], [5e-6, 7e-6])["write_s_per_byte"]
    1e-09
    >>> wire_cost([1000, 3000], [2e-6, 4e-6], [5e-6, 7e-6], (2000, 9e-6, 20e-6, 5e-5))["read_s"]
    2e-05
    """
    per_byte = slope(nbytes, write_s)
    if in_program is None:
        at, write, read, source = (
            float(np.median(nbytes)),
            np.median(write_s),
            np.median(read_s),
            "pattern",
        )
    else:
        (at, write, read, gather), source = in_program, "program"
    extra = (
        max(0.0, gather - float(pair["sendrecv"].seconds(at)))
        if in_program is not None and pair is not None and "sendrecv" in pair
        else 0.0
    )
    return {
        "write_s": rounded(max(0.0, float(write - per_byte * at))),
        "write_s_per_byte": per_byte,
        "read_s": rounded(float(read)),
        "allgather_extra_s": rounded(extra),
        "source": source,  # whose write_s and read_s: the real program's, or the pattern's
        "nbytes": list(nbytes),
        "write_samples_s": [rounded(t) for t in write_s],
        "read_samples_s": [rounded(t) for t in read_s],
        **(
            {
                "program": {
                    "nbytes": int(at),
                    "write_s": rounded(write),
                    "read_s": rounded(read),
                    "allgather_s": rounded(gather),
                }
            }
            if in_program
            else {}
        ),
    }


def slope(sizes, seconds):
    """Seconds per byte: the slope of a least-squares line through ``(sizes, seconds)``, >= 0
    (Thakur, Rabenseifner and Gropp 2005's gamma, from reductions timed at several sizes).

    >>> slope([1000, 2000, 4000], [3e-6, 5e-6, 9e-6])
    2e-09
    """
    value, _ = np.polyfit(np.asarray(sizes, float), np.asarray(seconds, float), 1)
    return max(float(f"{value:.12g}"), 0.0)


def reduction_gamma(quick=False):
    """gamma on this rank's own bytes, seconds per byte: ``np.add(into, incoming, out=into)``
    over float32 buffers of 64 KiB to 16 MiB, each repetition on buffers not touched since the
    last size; the `slope` through the medians: the profile's ``gamma_s_per_byte``."""
    sizes = [1 << k for k in range(16, 25, 2 if quick else 1)]
    medians = []
    for nbytes in sizes:
        pool = [np.ones(nbytes // 4, np.float32) for _ in range(4)]
        times = []
        for rep in range(5 if quick else 11):
            into, incoming = pool[rep % 2], pool[2 + rep % 2]
            t0 = time.perf_counter()
            np.add(into, incoming, out=into)
            times.append(time.perf_counter() - t0)
        medians.append(float(np.median(times)))
    return slope(sizes, medians)


def local_times(operation, quick=False, call_s=0.0):
    """(sizes, seconds) of ``operation(into, incoming)`` on float32 buffers of 1 KiB to 16
    MiB, both written just before (warm), the median repetition per size.

    ``np.add`` with ``out=into`` is ``[compute.reduction]``, a reduction's add of n bytes
    into n (a chunk just received and the buffer it joins in a ring's step): at the sizes
    programs and MPI's collectives add, the operands sit in the caches, here 0.035-0.045 ns a
    byte up to 512 KiB where `reduction_gamma`'s slope, which the largest sizes decide, said
    0.13-0.16 (2026-12-02). ``np.copyto`` is ``[compute.copy]``: the library's copy of a
    caller's send buffer into its receive buffer before an allreduce, a reduce or an
    allgather not in place (OSU's separate buffers: 1 MiB 46-63 us here). The library copies
    in C: ``call_s``, what the same Python call costs on empty buffers (`python_call_s`: 0.47
    us of np.copyto's 0.50 at 1 KiB here), is taken off, floored at 1 ns."""
    sizes = LOCAL_SIZES[:: 2 if quick else 1]
    seconds = []
    for nbytes in sizes:
        into, incoming = np.ones(nbytes // 4, np.float32), np.ones(nbytes // 4, np.float32)
        times = []
        for _ in range(7 if quick else 15):
            into.fill(1.0)  # written, as the buffer a step adds into
            incoming.fill(1.0)  # and the chunk it has just received
            t0 = time.perf_counter()
            operation(into, incoming)
            times.append(time.perf_counter() - t0)
        seconds.append(max(float(np.median(times)) - call_s, 1e-9))
    return sizes, seconds


def python_call_s(operation, repetitions=201):
    """Seconds of ``operation(empty, empty)`` on float32 buffers of no elements, timed as
    `local_times` times it (the median): what a call from Python costs before it touches a
    byte. MPI's collectives add and copy in C and do not pay it; a program's own adds, from
    Python, do (``[compute.reduction] call_s``: 0.93-1.02 us of the add's 1.3-1.6 at 1 KiB here,
    2026-12-02)."""
    empty = np.ones(0, np.float32)
    calls = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        operation(empty, empty)
        calls.append(time.perf_counter() - t0)
    return float(np.median(calls))


def _add(into, incoming):
    np.add(into, incoming, out=into)


def _put_allocation(document, allocation):
    """The hosts' own costs into the profile: ``[cluster] ranks_per_host``, ``[network]
    nic_bandwidth`` (the host's senders all at once), ``[network.memory]`` (one pair's one-way
    model: its small-message latency and its largest messages' rate; the host's copies all at
    once as total_bandwidth, at least one copy's)."""
    sizes = allocation["memory_sizes"]
    memory = fit_segments(sizes, allocation["memory_oneway"], MAX_REL_ERROR, MAX_SEGMENTS)
    copy_Bps = float(memory.beta_Bps(sizes[-1]))
    total_Bps = max(copy_Bps, allocation["memory_total_Bps"])
    document["cluster"]["ranks_per_host"] = allocation["ranks_per_host"]
    document["network"]["nic_bandwidth"] = bandwidth_text(allocation["nic_Bps"])
    document["network"]["memory"] = {
        "latency": seconds_text(float(memory.seconds(8))),
        "bandwidth": bandwidth_text(copy_Bps),
        "total_bandwidth": bandwidth_text(total_Bps),
        "oneway": memory.to_dict(),
    }


def _write_allreduce_table(out, allocation):
    """The allocation's own allreduce as OSU prints it, beside the profile; its path."""
    from twinsgd.calibration.osu_tables import format_table

    path = Path(out).with_suffix(".osu_allreduce.txt")
    note = (
        f"measured by twinsgd real.calibrate: {allocation['ranks']} ranks, "
        f"{allocation['ranks_per_host']} a host, {mpi_library()}"
    )
    rows = zip(allocation["allreduce_sizes"], allocation["allreduce_us"], strict=True)
    path.write_text("\n".join(format_table("osu_allreduce", note, rows)) + "\n")
    return path


def _fit_poll_wait(out, table, allocation):
    """``[cluster] poll_wait_s`` fitted to the allocation's own allreduce below 64 KiB (`python
    -m sim.calibrate --profile`: the fit simulates the table, so it is the simulator's), in
    place of the pair's beside pollers, which moved 4-19 us a rank from one calibration to the
    next on one 2 x 2 allocation; the pair's stays where the fit fails (a warning says why)."""
    spec = f"{table}:{allocation['ranks']}x{allocation['ranks_per_host']}"
    refit = ["--profile", str(out), "--from-osu", spec, "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "sim.calibrate", *refit],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        logger.warning(
            "[cluster] poll_wait_s is the pair's, not fitted to %s: %s", table, done.stderr.strip()
        )
    else:
        print(done.stdout.splitlines()[0])  # poll_wait_s: ... fitted to ...


def _allocation_summary(allocation, table, out):
    """What the allocation measured, and how to hold the model against its allreduce."""
    ranks, per_host = allocation["ranks"], allocation["ranks_per_host"]
    return (
        f"hosts of {per_host} ranks: NIC shared by {allocation['nic_senders']} senders "
        f"{bandwidth_text(allocation['nic_Bps'])}; memory "
        f"{bandwidth_text(allocation['memory_total_Bps'])} for {allocation['memory_copies']} "
        f"copies at once\nthe allocation's allreduce: {table}; the model's beside it: python -m "
        f"sim.osu osu_allreduce --profile {out} --ranks {ranks} --ranks-per-host {per_host} "
        f"--sizes 4:4MiB > simulated.txt; python -m twinsgd.analysis.osu_compare {table} "
        f"simulated.txt"
    )


def _incast_check(measured, oneway):
    """The incast's measured points beside the star's prediction from the one-way model: k
    messages of n bytes queue at rank 0's NIC, ``alpha(n) + k n / beta(n)``; None without one."""
    if measured["incast"] is None:
        return None
    k = measured["ranks"] - 1
    n = np.asarray(measured["incast_sizes"], dtype=float)
    t = np.asarray(measured["incast"])
    predicted = oneway.alpha_s(n) + k * n / oneway.beta_Bps(n)
    return {
        "ranks": int(k),
        "sizes": [int(x) for x in n],
        "seconds": [five_digits(x) for x in t],
        "predicted_s": [five_digits(x) for x in predicted],
        "max_rel_error": five_digits(np.max(np.abs(predicted / t - 1))),
    }


def head_start(gap_s, nbytes, shaper):
    """``[network.shaper]``'s head start from a fan-out of ``nbytes`` (`netbench.fan_out_gap`):
    the bucket bytes through rank 0's NIC before the second receiver saw its message, its
    burst and ``gap_s`` at its rate (past the message's own bytes: all of it went first).

    >>> shaper = {"rates_Bps": [1.25e8, 1.25e8], "bursts_bytes": [1.25e5, 1.25e5]}
    >>> head_start(0.004, 670760, shaper)["head_start_bytes"]
    625000.0
    """
    rate, burst = shaper["rates_Bps"][0], shaper["bursts_bytes"][0]
    return {
        "head_start_bytes": float(burst + rate * gap_s),
        "head_start_source": f"rank 0's blocking Sends of {nbytes} bytes to two other hosts, "
        f"back to back: the second receiver saw its message {gap_s * 1e3:.3g} ms after the "
        "first (median of 20)",
    }


def _emulated_shaper():
    """The token buckets of the emulated cluster these ranks run on (`real.cluster` says where
    its state is in ``TWINSGD_CLUSTER``), as ``[network.shaper]``: per host, in host order (the
    simulator's host h is h_h: ranks fill both in blocks), the configured rate (bytes/s of
    frames) and burst (bytes); None on any other network."""
    import json

    path = os.environ.get("TWINSGD_CLUSTER")
    if not path:
        return None
    try:
        hosts = json.loads(Path(path).read_text())["hosts"]
        return {
            "kind": "tbf",
            "source": f"real.cluster state {path}",
            "rates_Bps": [float(h["rate_Bps"]) for h in hosts],
            "bursts_bytes": [float(h["burst_B"]) for h in hosts],
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _refill_s(shaper):
    """Seconds an emulated cluster's token buckets take to fill from empty, with a half more
    (``[network.shaper]``'s largest burst over its rate); 0 on any other network."""
    if shaper is None:
        return 0.0
    pairs = zip(shaper["bursts_bytes"], shaper["rates_Bps"], strict=True)
    return 1.5 * max(burst / rate for burst, rate in pairs)


def _put_step_times(document, times):
    """Put ``times`` into ``[compute.steps.MODEL]`` of a profile document, and its median per
    sample into ``seconds_per_sample`` when the profile has no hot-loop figure for the model."""
    compute = document.setdefault("compute", {})
    compute.setdefault("steps", {})[times.model] = times.to_dict()
    per_sample = compute.setdefault("seconds_per_sample", {})
    if isinstance(per_sample, dict):
        per_sample.setdefault(times.model, rounded(times.median_s / times.batch_size))


if __name__ == "__main__":
    sys.exit(main())
