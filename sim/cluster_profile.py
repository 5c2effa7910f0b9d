"""Cluster profiles: what a cluster's network and nodes cost, in a TOML file.

`python -m real.calibrate` writes one for the machine it runs on (``calibrated = true``); the
presets in ``profiles/`` describe clusters from their hardware specifications and say so
(``calibrated = false``) until measurements replace them. ``python -m sim.run --profile NAME``
takes a preset by name (``polus-like``) or any file by path.

The format::

    [cluster]
    name = "..."
    calibrated = false
    source = "where the numbers come from"
    cores = 2                      # of one host (with --ranks-per-host: oversubscription)
    time_slice_s = 0.004           # a turn on a core when more ranks share them (measured)
    poll_wait_s = 1.5e-5           # over TCP: a message seen this much later by a rank polling
                                   # in a call, per rank past the cores (measured; `sim.cores`)
    memory_copies = 3.1            # one_machine: copies its memory moves at once at the
                                   # calibrated pair's rate (measured); more messages queue
    ranks_per_host = 20            # default of --ranks-per-host (ranks placed on a host)
    mpi = "openmpi"                # default of --mpi: whose choices (mpich, openmpi, openmpi-4.1)

    [network]                      # defaults for --network, --latency, --bandwidth
    topology = "fat-tree:4"
    latency = "1.2us"
    bandwidth = "12GB/s"
    nic_bandwidth = "24GB/s"       # each host's links (its NIC, all rails); default: bandwidth
    eager_bytes = 4096             # measured: the largest Send that returns before its receiver
    overhead_s = 4.8e-7            # measured: LogP's o, a rank's seconds inside an eager Send
    call_overhead_s = 1.5e-6       # measured: what a step inside MPI's own collectives saves

    [network.gap]                  # fitted to osu_bw: a rank's seconds a message in a stream
                                   # of them (LogGP's g, a PiecewiseCost by size); with it a
                                   # message between hosts keeps its sender g(n), its NICs
    [network.nic_gap]              # nic_gap(n) (fitted to osu_mbw_mr; default g), and lands
                                   # when the measured one way says (`RoutedNetwork`)

    [network.memory]               # between two ranks of one host (--memory-latency, ...)
    latency = "0.4us"              # a small message, one way
    bandwidth = "6GB/s"            # one copy
    total_bandwidth = "24GB/s"     # every copy of the host at once (its memory's share)
    cache = "32MiB"                # a call whose ranks' buffers on a host fit this (both or
    cache_bandwidth = "9GB/s"      # neither) copies at this rate instead (sim.osu, sim.run)

    [network.oneway]               # measured: a piecewise alpha-beta model of Send/Recv
    [network.sendrecv]             # ... and of Sendrecv (both ways at once); see costfit
    [network.written.oneway]       # the same two, hot, with the bytes written just before
    [network.written.sendrecv]     # each (dirty in the sender's cache): MPI's collectives'
                                   # own steps where they send what they copied or added
    [network.in_situ.oneway]       # the same two measured in situ (a compute step before
    [network.in_situ.sendrecv]     # each message, as programs send): what programs pay
    [network.in_situ.exchange]     # ... and gossip's exchange (Irecv, Isend, Waitall)
    [network.in_situ.written.sendrecv]  # a step of a program's own collective right after
                                   # another (the ring's: the loop, the call, bytes just
                                   # written), less its add; the first step is in situ
    [network.in_situ.jitter]       # min_bytes, and per pattern the quantiles of a message's
                                   # time over the median, per measured size ({sizes,
                                   # quantiles}; or 101 for all sizes): a message takes
                                   # one draw from its size's
    [network.in_situ.wire]         # write_s, write_s_per_byte, read_s: a compressed message's
                                   # wire bytes written before a send and read after a
                                   # receive, in situ (`WireCost`); allgather_extra_s: MPI's
                                   # Allgather of them in the program past its exchange
    [network.in_situ.send]         # an eager Send's seconds in its sender by size, in situ
                                   # (a PiecewiseCost): o as programs pay it (over TCP the
                                   # kernel's copy into the socket grows with the bytes)
    [network.in_situ.probe.later]  # a program's Recv, which probes first, of a message it
    [network.in_situ.probe.seen]   # waited for: done this much later than Recv alone, and its
                                   # probe sees it this long after it began to move (the wait's
                                   # end); each a PiecewiseCost by size (`ProbeCost`)
    [network.shaper]               # an emulated cluster's token buckets (real.cluster):
    rates_Bps = [1.25e8, 1.25e8]   # per host, as configured
    bursts_bytes = [125000.0, 125000.0]
    head_start_bytes = 600000.0    # optional: a flow on an idle NIC goes first for these
                                   # bytes (`Shaping.head_start_bytes`; default TCP's, measured)
    [network.stack]                # measured over TCP: the kernel's CPU seconds a byte on
    send_s_per_byte = 6.5e-10      # the sender's core and on the receiver's, taken from the
    recv_s_per_byte = 3.0e-10      # compute there while bytes move (`sim.cores.StackCpu`)

When a calibrated profile has the measured models and neither --latency nor --bandwidth is
given, the simulator charges each message its pattern's measured ``alpha(n) + n / beta(n)``
(a training program's the in-situ model where the profile has one, `ClusterProfile.costs_for`;
``sim.osu``'s the hot one, as OSU's loops are hot); with a shaper too, it simulates the token
buckets (`sim.shaping`) instead.

    [compute]                      # for --compute profile (and --ghost)
    flops_per_s = 2.0e10           # sustained training FLOP/s of one rank
    seconds_per_sample = { mlp = 1.1e-5, cnn = 2.3e-4 }   # or one number for any model
    seconds_per_step = { mlp = 6.5e-4, cnn = 1.2e-3 }     # measured with them: a step of b
                                   # samples lasts seconds_per_step + b * seconds_per_sample
    seconds_per_update = { mlp = 3.5e-4, cnn = 3.0e-4 }   # the optimizer's part of a step
    switch_s = { mlp = 7.0e-5 }    # a step back on a core shared by more ranks than cores,
                                   # after others ran there, takes this much more (caches)
    gamma_s_per_byte = 1.2e-10     # a reduction's arithmetic: seconds a byte combined
    cold_own_s = 1.4e-05           # a program's own code right after a message of
    cold_own_bytes = 670240        # cold_own_bytes takes this much more than warm,
    cold_own_code_s = 2.6e-05      # over its first this many seconds (shorter code: its share)
    reference_s = 1.7e-4           # a fixed kernel's time at calibration: own code timed in
                                   # the simulator is put at that speed (`calibration.pace`)

    [compute.reduction]            # a reduction's add of n bytes into n (warm operands, as
                                   # a received chunk and the buffer it joins), by size (a
                                   # PiecewiseCost): charged instead of gamma n where given
    call_s = 1.0e-6                # of it, Python's call (on empty buffers): a program's adds
                                   # pay it, MPI's own (in C) are charged the table less it

    [compute.copy]                 # a copy of n bytes (warm), by size: what MPI's allreduce,
                                   # reduce and allgather pay first when not in place (sim.osu)
    [compute.copy_read_by_peer]    # the same into bytes another rank has just read through
                                   # the library (one machine: MPICH moves a large message in
                                   # one copy, its receiver reading the sender's buffer): the
                                   # part of that first copy the other ranks read in OSU's
                                   # call before (sim.osu, on the machine it was measured on)

    [compute.finish]               # measured in situ: what an allreduce of 2 ranks pays past
                                   # its messages and add, by size (a PiecewiseCost): the
                                   # mean's pass, charged instead of gamma n

    [compute.busy.mlp]             # a step while k processes compute on the host at once,
    processes = [1, 2, 4]          # over one alone: per k, 11 quantiles (0, 10, ..., 100 %)
    factors = [[1.0, ...], ...]    # of the processes' factors (`calibration.busycores`)

    [compute.steps.mlp]            # for --compute empirical: steps measured in a real run
    batch_size = 100
    steps = 396                    # how many the quantiles summarise
    ranks = 2                      # of the measured run, and the cores they shared (0: none)
    cores = 2
    quantiles_s = [0.0021, ...]    # seconds at probabilities 0, 0.01, ..., 1 (101 values)

``[cluster] one_machine = true`` says every host of the profile is emulated on one machine of
``cores`` cores (`real.cluster`): the ranks of a run share those cores whatever their network
host, so the simulator slows compute when a run has more ranks than cores.

A training sample costs three forward passes (the forward, and the backward at twice it), so from
a FLOP rate a model of ``f`` forward FLOPs per sample takes ``3 f / flops_per_s`` seconds a sample;
a measured ``seconds_per_sample`` for the run's model comes first.
"""

import hashlib
import importlib.resources
import math
import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sim.network import MemoryPath
from sim.shaping import TCP_HEAD_START_BYTES, ShapedPattern, Shaping
from twinsgd.calibration.busycores import BusyCores
from twinsgd.calibration.costfit import PiecewiseCost
from twinsgd.calibration.jitter import Jitter
from twinsgd.calibration.steptimes import StepTimes
from twinsgd.data.sources import SOURCES
from twinsgd.programs.mpi_choices import LIBRARIES
from twinsgd.run.units import parse_bandwidth_Bps, parse_nbytes, parse_seconds

PRESETS = importlib.resources.files("sim") / "profiles"  # package data: works installed
# message patterns a calibration measures a cost model of; ``exchange`` (gossip's Irecv, Isend
# and Waitall) in situ only, and where a profile lacks it an exchange is priced as a Sendrecv
PATTERNS = ("oneway", "sendrecv", "exchange")


@dataclass(frozen=True)
class ClusterProfile:
    """A parsed profile; None where the file says nothing."""

    path: str
    source: bytes = field(default=b"", repr=False)  # the file as read (copied into run folders)
    name: str = ""
    calibrated: bool = False
    cores: int | None = None  # of one host
    time_slice_s: float | None = None  # a turn on a core when ranks share them (`sim.cores`)
    poll_wait_s: float = 0.0  # over TCP: a message seen later per rank past the cores
    memory_copies: float | None = None  # copies its memory moves at once at the pair's rate
    ranks_per_host: int | None = None  # placed on one host
    mpi: str | None = None  # the MPI library whose algorithm choices it was measured with
    gamma_s_per_byte: float | None = None  # the reduction's arithmetic, seconds a byte
    reduction: PiecewiseCost | None = None  # combining n bytes, measured by size
    reduction_call_s: float = 0.0  # of which Python's call, which MPI's adds (in C) do not pay
    copy: PiecewiseCost | None = None  # copying n bytes in memory, measured by size
    copy_read_by_peer: PiecewiseCost | None = None  # ... into bytes another rank just read
    finish: PiecewiseCost | None = None  # an allreduce's mean pass, in situ, by size
    wire: "WireCost | None" = None  # a compressed message's wire bytes written and read, in situ
    nic_bandwidth_Bps: float | None = None  # each host's links to the network
    memory: MemoryPath | None = None  # between two ranks of one host
    one_machine: bool = False  # every host emulated on one machine of `cores` cores
    network: str | None = None
    latency_s: float | None = None
    bandwidth_Bps: float | None = None
    flops_per_s: float | None = None
    seconds_per_sample: dict = field(default_factory=dict)  # model name (or "*") -> seconds
    seconds_per_step: dict = field(default_factory=dict)  # the same keys: a step's fixed part
    seconds_per_update: dict = field(default_factory=dict)  # ... and the optimizer's share of it
    switch_s: dict = field(default_factory=dict)  # ... more when its caches were refilled
    cold_own_s: float | None = None  # own code right after a large message: more than warm
    cold_own_code_s: float | None = None  # ... over its first this many seconds
    reference_s: float | None = None  # `calibration.pace`'s kernel at the calibration's speed
    step_times: dict = field(default_factory=dict)  # model name -> StepTimes
    busy: dict = field(default_factory=dict)  # model name -> BusyCores (a step as k compute)
    timed_on: tuple | None = None  # (H, W, C) of the images the models' steps were timed on
    costs: dict = field(default_factory=dict)  # message pattern -> PiecewiseCost (measured)
    gap: PiecewiseCost | None = None  # a rank's seconds a message of a stream (osu_bw)
    nic_gap: PiecewiseCost | None = None  # a host NIC's seconds a message (osu_mbw_mr)
    in_situ: dict = field(default_factory=dict)  # the same, measured as programs send
    in_situ_jitter: dict = field(default_factory=dict)  # pattern -> the spread of t/median
    send: object = None  # an eager Send's seconds in its sender, in situ (PiecewiseCost) or None
    probe: object = None  # a program's Recv (probe first), by size: a `ProbeCost`, or None
    shaper: tuple = ()  # (rate_Bps, burst_bytes) of each emulated host's token buckets
    head_start_bytes: float = TCP_HEAD_START_BYTES  # `Shaping.head_start_bytes` (shaper's)
    stack_cpu: tuple | None = None  # the kernel's CPU seconds a byte sent and received (TCP)
    eager_bytes: int = 0  # the largest Send that returns before its receiver is there (measured)
    send_overhead_s: float = 0.0  # LogP's o: the sender's seconds inside an eager Send (measured)
    call_overhead_s: float = 0.0  # a step inside MPI's collectives under the hot loop's

    @property
    def sha256(self):
        """The file's content hash, as config.json records it (two runs on the same profile)."""
        return hashlib.sha256(self.source).hexdigest()

    def costs_for(self, programs):
        """The measured cost models by pattern that messages are charged: a training program's
        (``programs`` True) the in-situ ones where the profile has them, else the hot loop's
        (a benchmark's, `sim.osu`)."""
        return self.in_situ if programs and self.in_situ else self.costs

    def slowed_costs(self, slowdown, costs=None):
        """The measured cost models (``costs``, default the hot loop's) on a machine
        ``slowdown`` times oversubscribed (`Slowed`)."""
        costs = self.costs if costs is None else costs
        if slowdown == 1.0:
            return costs
        return {name: Slowed(cost, slowdown) for name, cost in costs.items()}

    def shaping(self, slowdown=1.0):
        """The `sim.shaping.Shaping` of an emulated cluster's profile, or None: its buckets,
        and per measured pattern the latency of a small message and the payload per shaped
        byte (`_past_the_burst_Bps` over the median configured rate); the rate
        of bytes within a burst is the one-way model's at half a burst (a ping-pong finds its
        bucket full; a Sendrecv back to back never does). ``slowdown``: as `Slowed`, on the
        latency and the rate within a burst (the machine's own work), not on the buckets. A
        message that fits in a burst moves at the one-way model's own rate for its size
        (`Shaping.payload_Bps`)."""
        costs = self.costs
        if not self.shaper or not costs:
            return None
        rates = sorted(rate for rate, _ in self.shaper)
        rate, half_burst = rates[len(rates) // 2], min(b for _, b in self.shaper) / 2
        oneway = costs.get("oneway", next(iter(costs.values())))
        line = oneway.beta_Bps(half_burst)
        patterns = {}
        burst = max(b for _, b in self.shaper)
        for name, cost in costs.items():
            efficiency = min(1.0, _past_the_burst_Bps(cost, burst) / rate)
            patterns[name] = ShapedPattern(float(cost.alpha_s(8.0)) * slowdown, efficiency)
        burst_cost = oneway if slowdown == 1.0 else Slowed(oneway, slowdown)
        return Shaping(
            self.shaper, float(line) / slowdown, patterns, burst_cost, self.head_start_bytes
        )

    def check_timed_on(self, model, input_shape):
        """ValueError if this profile timed ``model``'s steps on images of another shape than
        ``input_shape`` (H, W, C): a cnn's step on 28x28x1 is not its step on 32x32x3."""
        measured = model in self.step_times or model in self.seconds_per_sample
        if measured and self.timed_on is not None and self.timed_on != tuple(input_shape):
            have, want = ("x".join(map(str, s)) for s in (self.timed_on, input_shape))
            raise ValueError(
                f"--profile {self.path} timed {model} on {have} images, this run's are {want}: "
                f"calibrate on the run's data (real.calibrate --dataset, --data-dir)"
            )

    def compute_step_times(self, model):
        """The `StepTimes` measured for ``model``; ValueError if the profile has none."""
        if model not in self.step_times:
            have = ", ".join(sorted(self.step_times)) or "none"
            raise ValueError(
                f"--profile {self.path}: no [compute.steps.{model}] (measured step "
                f"times; have: {have}) for --compute empirical: run python -m "
                f"real.calibrate, or real.calibrate --from-run RUN_DIR"
            )
        return self.step_times[model]

    def compute_seconds_per_step(self, model):
        """The part of a training step of ``model`` that does not grow with its batch, seconds:
        measured with the profile's ``seconds_per_sample`` for that model, else 0 (a FLOP rate
        or an older profile charges per sample alone)."""
        return self.gradient_fit(model)[0]

    def gradient_fit(self, model, whole_step=True):
        """``(fixed seconds, seconds per sample)`` of a training step of ``model`` as the hot
        loop measured it, for moving measured step times to another batch; ``whole_step``
        False: of the gradient alone (the update's part taken off). (0, 0) without a measured
        per-sample figure."""
        key = next((k for k in (model, "*") if k in self.seconds_per_sample), None)
        if key is None:
            return 0.0, 0.0
        fixed = self.seconds_per_step.get(key, 0.0)
        if not whole_step:
            fixed = max(0.0, fixed - self.seconds_per_update.get(key, 0.0))
        return fixed, self.seconds_per_sample[key]

    def switch_seconds(self, model):
        """Seconds a step of ``model`` takes more on a core shared by more ranks than cores,
        back on it after others ran there (`sim.cores`); 0 where not measured."""
        return next((self.switch_s[k] for k in (model, "*") if k in self.switch_s), 0.0)

    @property
    def has_compute(self):
        """Whether the profile times compute (an OSU table's fit does not: its [compute] holds
        gamma at most)."""
        return bool(self.seconds_per_sample or self.flops_per_s or self.step_times)

    def compute_seconds_per_sample(self, model, flops_per_sample):
        """Seconds one training sample of ``model`` takes on one node; ValueError if the profile
        cannot say (no measurement for the model and no FLOP rate, or no FLOP count)."""
        for key in (model, "*"):
            if key in self.seconds_per_sample:
                return self.seconds_per_sample[key]
        if not flops_per_sample:
            return 0.0  # a bare parameter count: communication alone
        if self.flops_per_s:
            return 3 * flops_per_sample / self.flops_per_s
        raise ValueError(
            f"--profile {self.path}: [compute] has no seconds_per_sample for "
            f"{model!r} and no flops_per_s"
        )


@dataclass(frozen=True)
class WireCost:
    """``[network.in_situ.wire]``: the seconds a program spends on a compressed message's wire
    bytes (`twinsgd.programs.compression.wire`), measured in situ: writing them before a send,
    ``write_s + write_s_per_byte n``, and reading a message from them after a receive,
    ``read_s`` (its arrays are views); and what MPI's Allgather of them took in the real
    program past the exchange of its bytes, ``allgather_extra_s`` a call (0 where not
    measured). ``slowdown``: as `Slowed`, for more ranks a core."""

    write_s: float
    write_s_per_byte: float
    read_s: float
    slowdown: float = 1.0
    allgather_extra_s: float = 0.0

    @classmethod
    def from_dict(cls, table):
        """From the profile's table; ValueError naming a missing or negative key."""
        values = {}
        for key in ("write_s", "write_s_per_byte", "read_s"):
            if key not in table:
                raise ValueError(f"[network.in_situ.wire] needs {key}")
            values[key] = _number(table[key], f"[network.in_situ.wire] {key}")
        if "allgather_extra_s" in table:
            values["allgather_extra_s"] = _number(
                table["allgather_extra_s"], "[network.in_situ.wire] allgather_extra_s"
            )
        return cls(**values)

    def write(self, nbytes):
        """Seconds to write a message of ``nbytes``."""
        return (self.write_s + self.write_s_per_byte * nbytes) * self.slowdown

    def read(self):
        """Seconds to read a message."""
        return self.read_s * self.slowdown

    def allgather_extra(self):
        """Seconds an allgather of compressed messages pays past its messages, once a call."""
        return self.allgather_extra_s * self.slowdown


@dataclass(frozen=True)
class ProbeCost:
    """A program's Recv of a message it waited for, as the real backend receives it: in
    `real.backend.probe`'s loop, then ``Recv`` (``[network.in_situ.probe]``, measured by
    `real.netbench.probe_delay`). ``later``: how much later it is done than a plain ``Recv``
    (a rendezvous sender waits as long); ``seen``: how long after the message began to move
    the probe sees it, where the real clock's wait ends. Each a cost model by size
    (``seconds(n)``)."""

    later: object
    seen: object

    @classmethod
    def from_dict(cls, table):
        """From the profile's table: ``later`` and ``seen``, each a `PiecewiseCost`'s dict."""
        for key in ("later", "seen"):
            if key not in table:
                raise ValueError(f"[network.in_situ.probe] needs {key}")
        return cls(PiecewiseCost.from_dict(table["later"]), PiecewiseCost.from_dict(table["seen"]))

    def slowed(self, slowdown):
        """Both costs `Slowed` by ``slowdown``."""
        return ProbeCost(Slowed(self.later, slowdown), Slowed(self.seen, slowdown))


@dataclass(frozen=True)
class Slowed:
    """A measured cost model on a machine whose cores more ranks share than when it was
    measured: MPICH's blocking calls spin, so every rank is always runnable and each gets
    ``1 / slowdown`` of the cores it had, for moving bytes (shared-memory copies, the TCP
    stack) as for computing. Latency ``slowdown`` times longer, bandwidth that much lower."""

    cost: object
    slowdown: float

    def alpha_s(self, nbytes):
        """The slowed latency (intercept) of ``nbytes``'s segment, seconds."""
        return self.cost.alpha_s(nbytes) * self.slowdown

    def beta_Bps(self, nbytes):
        """The slowed bandwidth of ``nbytes``'s segment, bytes/s."""
        return self.cost.beta_Bps(nbytes) / self.slowdown

    def seconds(self, nbytes):
        """The slowed time of ``nbytes``, seconds."""
        return self.cost.seconds(nbytes) * self.slowdown


@dataclass(frozen=True)
class InLibrary:
    """A cost measured as a call from Python (``cost.seconds(n)``), as MPI's library pays it
    in C: ``call_s`` less, at least 0. The reduction's add is timed from Python, as the
    programs add; the library adds inside its collectives with no call of its own (a 2-rank
    MPICH allreduce of 8 bytes, one exchange and one add: 6.4-7.2 us measured, 8.1 simulated
    with the add's 1.4 us at Python's cost, 2026-12-02)."""

    cost: object
    call_s: float

    def seconds(self, nbytes):
        """The time of ``nbytes`` less the call, seconds (>= 0)."""
        return max(float(self.cost.seconds(nbytes)) - self.call_s, 0.0)


def _past_the_burst_Bps(cost, burst_bytes):
    """The payload rate a measured pattern ``cost`` shows once the buckets are empty: the
    median of its model's rate at the powers of two from twice ``burst_bytes`` to its largest
    size (where its last segment begins, if that one is open; the largest alone if no power of
    two lies between). A median, as one segment at either end may stray: on an emulated 1
    Gbit/s pair the Sendrecvs past 24 MB moved 101.5 MB/s where every size from 92 KB moved
    118 (2026-11-27), and the largest size alone made every Sendrecv of a run 14 % slower
    than measured."""
    largest = float(cost.max_bytes[-1])
    if not math.isfinite(largest):  # an open last segment: up to where it begins
        largest = max(float(cost.min_bytes[-1]), 2 * burst_bytes)
    low = math.ceil(math.log2(2 * burst_bytes))
    sizes = [2.0**k for k in range(low, math.floor(math.log2(largest)) + 1)] or [largest]
    return statistics.median(float(cost.beta_Bps(n)) for n in sizes)


def load_profile(name_or_path):
    """The `ClusterProfile` of a preset name or a TOML file; ValueError (one line naming the
    file) if it is missing or does not parse."""
    path = Path(name_or_path)
    if not path.exists() and (PRESETS / f"{name_or_path}.toml").exists():
        path = PRESETS / f"{name_or_path}.toml"
    try:
        source = path.read_bytes()
        document = tomllib.loads(source.decode())
        cluster, network = document.get("cluster", {}), document.get("network", {})
        compute = document.get("compute", {})
        return ClusterProfile(
            path=str(name_or_path),
            source=source,
            name=str(cluster.get("name", path.stem)),
            calibrated=bool(cluster.get("calibrated", False)),
            cores=int(_number(cluster["cores"], "[cluster] cores", above=0))
            if "cores" in cluster
            else None,
            time_slice_s=_number(cluster["time_slice_s"], "[cluster] time_slice_s", above=0)
            if "time_slice_s" in cluster
            else None,
            poll_wait_s=_number(cluster.get("poll_wait_s", 0.0), "[cluster] poll_wait_s"),
            memory_copies=_number(cluster["memory_copies"], "[cluster] memory_copies", 0)
            if "memory_copies" in cluster
            else None,
            ranks_per_host=int(_number(cluster["ranks_per_host"], "[cluster] ranks_per_host", 0))
            if "ranks_per_host" in cluster
            else None,
            nic_bandwidth_Bps=_value(network, "nic_bandwidth", parse_bandwidth_Bps, "[network]"),
            memory=_memory(network.get("memory")),
            one_machine=bool(cluster.get("one_machine", False)),
            mpi=_library(cluster.get("mpi")),
            gamma_s_per_byte=_number(compute["gamma_s_per_byte"], "[compute] gamma_s_per_byte")
            if "gamma_s_per_byte" in compute
            else None,
            reduction=_reduction(compute.get("reduction")),
            reduction_call_s=_number(
                compute["reduction"].get("call_s", 0.0), "[compute.reduction] call_s"
            )
            if isinstance(compute.get("reduction"), dict)
            else 0.0,
            copy=PiecewiseCost.from_dict(compute["copy"]) if "copy" in compute else None,
            copy_read_by_peer=PiecewiseCost.from_dict(compute["copy_read_by_peer"])
            if "copy_read_by_peer" in compute
            else None,
            finish=PiecewiseCost.from_dict(compute["finish"]) if "finish" in compute else None,
            step_times={
                str(m): StepTimes.from_dict(d, str(m)) for m, d in compute.get("steps", {}).items()
            },
            busy={
                str(m): BusyCores.from_dict(d, str(m)) for m, d in compute.get("busy", {}).items()
            },
            timed_on=_timed_on(compute),
            costs={
                **{
                    pattern: PiecewiseCost.from_dict(network[pattern])
                    for pattern in PATTERNS
                    if pattern in network
                },
                **{  # the same with the bytes written just before (`LibraryCall.writes`)
                    f"{pattern}-written": PiecewiseCost.from_dict(network["written"][pattern])
                    for pattern in PATTERNS
                    if pattern in network.get("written", {})
                },
            },
            gap=PiecewiseCost.from_dict(network["gap"]) if "gap" in network else None,
            nic_gap=PiecewiseCost.from_dict(network["nic_gap"]) if "nic_gap" in network else None,
            in_situ={
                **{
                    pattern: PiecewiseCost.from_dict(network["in_situ"][pattern])
                    for pattern in PATTERNS
                    if pattern in network.get("in_situ", {})
                },
                **{  # a step of a program's collective right after another
                    f"{pattern}-written": PiecewiseCost.from_dict(table)
                    for pattern, table in network.get("in_situ", {}).get("written", {}).items()
                    if pattern in PATTERNS
                },
            },
            in_situ_jitter=_jitter(network.get("in_situ", {}).get("jitter", {})),
            wire=WireCost.from_dict(network["in_situ"]["wire"])
            if "wire" in network.get("in_situ", {})
            else None,
            send=PiecewiseCost.from_dict(network["in_situ"]["send"])
            if "send" in network.get("in_situ", {})
            else None,
            probe=ProbeCost.from_dict(network["in_situ"]["probe"])
            if "probe" in network.get("in_situ", {})
            else None,
            shaper=_shaper(network.get("shaper")),
            head_start_bytes=_number(
                (network.get("shaper") or {}).get("head_start_bytes", TCP_HEAD_START_BYTES),
                "[network.shaper] head_start_bytes",
            ),
            stack_cpu=_stack(network.get("stack")),
            eager_bytes=int(_number(network.get("eager_bytes", 0), "[network] eager_bytes")),
            send_overhead_s=_number(network.get("overhead_s", 0.0), "[network] overhead_s"),
            call_overhead_s=_number(
                network.get("call_overhead_s", 0.0), "[network] call_overhead_s"
            ),
            network=_topology(network.get("topology"), path),
            latency_s=_value(network, "latency", parse_seconds, "[network]"),
            bandwidth_Bps=_value(network, "bandwidth", parse_bandwidth_Bps, "[network]"),
            flops_per_s=(
                _number(compute["flops_per_s"], "[compute] flops_per_s", above=0)
                if "flops_per_s" in compute
                else None
            ),
            seconds_per_sample=_per_model(compute, "seconds_per_sample"),
            seconds_per_step=_per_model(compute, "seconds_per_step"),
            seconds_per_update=_per_model(compute, "seconds_per_update"),
            switch_s=_per_model(compute, "switch_s"),
            cold_own_s=(
                _number(compute["cold_own_s"], "[compute] cold_own_s")
                if "cold_own_s" in compute
                else None
            ),
            cold_own_code_s=(
                _number(compute["cold_own_code_s"], "[compute] cold_own_code_s", above=0)
                if "cold_own_code_s" in compute
                else None
            ),
            reference_s=(
                _number(compute["reference_s"], "[compute] reference_s", above=0)
                if "reference_s" in compute
                else None
            ),
        )
    except FileNotFoundError:
        presets = ", ".join(sorted(p.stem for p in PRESETS.glob("*.toml")))
        raise ValueError(f"--profile {name_or_path}: no such file or preset ({presets})") from None
    except IsADirectoryError:
        raise ValueError(f"--profile {name_or_path}: is a folder, not a TOML file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"--profile {name_or_path}: not valid TOML ({err})") from None
    except ValueError as err:
        raise ValueError(f"--profile {name_or_path}: {err}") from None
    except (OSError, TypeError, AttributeError, KeyError) as err:
        raise ValueError(f"--profile {name_or_path}: {type(err).__name__}: {err}") from None


def _jitter(table):
    """``[network.in_situ.jitter]``: per pattern the spread of a message's time over the
    median, 101 quantiles or ``{sizes, quantiles}`` per size (`calibration.jitter.Jitter`
    checks them, and `Jitter.to_dict` is what is kept); ValueError naming the key."""
    jitter = {}
    for pattern in PATTERNS:
        if pattern in table:
            try:
                jitter[pattern] = Jitter.from_table(table[pattern]).to_dict()
            except (ValueError, TypeError) as err:
                raise ValueError(f"[network.in_situ.jitter] {pattern}: {err}") from None
    return jitter


def _per_model(compute, key):
    """``[compute] key`` as {model name (or "*" for any): seconds}: a table, or one number for
    every model; each a finite number >= 0."""
    table = compute.get(key, {})
    table = table if isinstance(table, dict) else {"*": table}
    return {str(k): _number(v, f"[compute] {key} ({k})") for k, v in table.items()}


def _number(value, where, above=None):
    """``value`` as a finite float >= 0 (> ``above`` if given); ValueError naming ``where``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (above is not None and value <= above)
    ):
        rule = f"> {above:g}" if above is not None else ">= 0"
        raise ValueError(f"{where} must be a finite number {rule}, got {value!r}")
    return float(value)


def _reduction(table):
    """``[compute.reduction]`` as a `PiecewiseCost` (its ``call_s`` apart), or None."""
    if table is None:
        return None
    if isinstance(table, dict):
        table = {key: value for key, value in table.items() if key != "call_s"}
    return PiecewiseCost.from_dict(table)


def _library(name):
    """``[cluster] mpi``: one of `programs.mpi_choices.LIBRARIES`, or None."""
    if name is not None and name not in LIBRARIES:
        raise ValueError(f"[cluster] mpi must be one of {', '.join(LIBRARIES)}, got {name!r}")
    return name


def _value(table, key, parse, where):
    """``table[key]`` parsed by ``parse``, None if absent; ValueError naming the table and key."""
    if key not in table:
        return None
    try:
        return parse(table[key])
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"{where} {key}: {err}") from None


def _timed_on(compute):
    """``[compute] input_shape`` as a tuple; else the shape of ``[compute] dataset`` where its
    name says it (profiles written before the shape was); None if neither does."""
    if "input_shape" in compute:
        shape = compute["input_shape"]
        if not (
            isinstance(shape, list)
            and len(shape) == 3
            and all(isinstance(x, int) and x > 0 for x in shape)
        ):
            raise ValueError(f"[compute] input_shape must be [H, W, C], got {shape!r}")
        return tuple(shape)
    # the bundled subset is MNIST's, the substitute CIFAR-10's format
    name = str(compute.get("dataset", "")).removesuffix("-subset").removesuffix("-substitute")
    return SOURCES[name].input_shape if name in SOURCES else None


def _topology(spec, path):
    """``[network] topology``, checked as --network's would be (a graph file relative to the
    working folder, as the flag's); ValueError naming the key."""
    if spec is None:
        return None
    from sim.network_graphs import check_network_spec

    try:
        check_network_spec(str(spec))
    except ValueError as err:
        message = str(err).removeprefix("--network").lstrip(": ")
        raise ValueError(f"[network] topology: {message}") from None
    return str(spec)


def _memory(table):
    """``[network.memory]`` as a `MemoryPath`: one copy's latency and bandwidth, and as many
    channels as ``total_bandwidth`` holds copies (1 without it); None without the table."""
    if table is None:
        return None
    missing = [key for key in ("latency", "bandwidth") if key not in table]
    if missing:
        raise ValueError(f"[network.memory] needs latency and bandwidth, {missing[0]} is missing")
    bandwidth_Bps = _value(table, "bandwidth", parse_bandwidth_Bps, "[network.memory]")
    total_Bps = _value(
        {"total_bandwidth": table.get("total_bandwidth", table["bandwidth"])},
        "total_bandwidth",
        parse_bandwidth_Bps,
        "[network.memory]",
    )
    if total_Bps < bandwidth_Bps:
        raise ValueError("[network.memory] total_bandwidth must be >= its bandwidth (one copy's)")
    if ("cache" in table) != ("cache_bandwidth" in table):
        raise ValueError("[network.memory] cache and cache_bandwidth go together (both or neither)")
    cache_bytes = _value(table, "cache", parse_nbytes, "[network.memory]") or 0
    cache_Bps = _value(table, "cache_bandwidth", parse_bandwidth_Bps, "[network.memory]") or 0.0
    if "cache" in table and not (cache_bytes > 0 and cache_Bps > 0):
        raise ValueError("[network.memory] cache and cache_bandwidth must be > 0")
    return MemoryPath(
        _value(table, "latency", parse_seconds, "[network.memory]"),
        bandwidth_Bps,
        max(1, round(total_Bps / bandwidth_Bps)),
        cache_bytes,
        cache_Bps,
    )


def _stack(table):
    """``[network.stack]`` as (send_s_per_byte, recv_s_per_byte); None without one."""
    if table is None:
        return None
    keys = ("send_s_per_byte", "recv_s_per_byte")
    if not isinstance(table, dict) or any(key not in table for key in keys):
        raise ValueError("[network.stack] needs send_s_per_byte and recv_s_per_byte")
    return tuple(_number(table[key], f"[network.stack] {key}") for key in keys)


def _shaper(table):
    """``[network.shaper]`` as ((rate_Bps, burst_bytes), ...) per host; () without one."""
    if table is None:
        return ()
    rates, bursts = table["rates_Bps"], table["bursts_bytes"]
    if not rates or len(rates) != len(bursts) or not all(float(x) > 0 for x in (*rates, *bursts)):
        raise ValueError("[network.shaper] needs rates_Bps and bursts_bytes, one per host, > 0")
    return tuple((float(r), float(b)) for r, b in zip(rates, bursts, strict=True))
