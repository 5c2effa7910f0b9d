"""The simulated cluster as one value: hosts, their ranks and cores, links, NICs and memory paths,
the compute model and the fault schedule, built once from ``sim.run``'s flags and a profile.

Why one value: the cluster's options used to travel as an argparse Namespace and be re-read
wherever a part of the model needed one (the network, the compute model, the header, the
analytic engine). `build_cluster` reads each flag once, resolves it against the profile (a flag
wins, then the profile, then the default stated here), checks it, and hands back a frozen
`Cluster`; everything downstream reads that.

Defaults where neither a flag nor a profile says (each stated in config.json):

- the network: a star of 5 us node-to-node latency and 10 Gbit/s NICs;
- one rank a host; with more, their memory path is `ASSUMED_MEMORY`: 0.5 us one way, 5 GB/s a
  copy, 4 copies at once (the order of an MPI shared-memory ping-pong between cores of one
  two-socket Xeon node: assumed, not measured; a profile's ``[network.memory]`` replaces it).
"""

import math
from dataclasses import dataclass, replace

from sim.cluster_profile import PATTERNS, InLibrary, Slowed
from sim.compute import ComputeModel, compute_model
from sim.cores import DEFAULT_SLICE_S, eevdf_slice
from sim.network import MemoryPath, make_network, slowest_link
from twinsgd.calibration.jitter import Jitter
from twinsgd.programs.mpi_choices import LIBRARIES
from twinsgd.run.faults import FaultSchedule, parse_fail_spec
from twinsgd.run.units import flag_type, parse_bandwidth_Bps, parse_seconds

DEFAULT_LATENCY_S, DEFAULT_BANDWIDTH_BPS = 5e-6, 1.25e9  # a star of 5 us and 10 Gb/s NICs
ASSUMED_MEMORY = MemoryPath(latency_s=0.5e-6, bandwidth_Bps=5e9, channels=4)


@dataclass(frozen=True)
class Cluster:
    """A simulated cluster, checked (`build_cluster` makes one from flags and a profile).

    ``ranks`` ranks on ``hosts`` hosts of ``ranks_per_host`` ranks (rank r on host
    ``r // ranks_per_host``; the last host may hold fewer) and ``cores_per_host`` cores (None:
    as many as ranks). ``network``: the ``--network`` spec; ``latency_s`` per hop and
    ``bandwidth_Bps`` per link (on a star: node to node); ``nic_bandwidth_Bps``: each host's
    links; ``memory``: the path between two ranks of one host (`sim.network.MemoryPath`).
    ``costs`` and ``shaping``: a calibrated profile's measured message costs and token buckets
    ({} and None otherwise), of messages between hosts; ``slowdown`` the factor they were
    slowed by for more ranks a core than measured; ``eager_bytes`` the measured eager limit and
    ``send_overhead_s`` an eager Send's time in its sender (LogP's o); ``call_overhead_s`` what
    a step inside MPI's own collectives saves against the measured hot loop's (its steps after
    the first arrive that much sooner).
    """

    ranks: int
    ranks_per_host: int
    cores_per_host: int | None
    network: str
    latency_s: float
    bandwidth_Bps: float
    nic_bandwidth_Bps: float
    memory: MemoryPath
    memory_source: str  # "flags", "profile" or "assumed"
    mpi: str  # whose algorithm choices --allreduce mpi runs (`programs.mpi_choices`)
    gamma: float  # the reduction's arithmetic, seconds per byte combined
    reduction: object  # the same measured by size (a PiecewiseCost, `combined_s`), or None
    reduction_call_s: float  # of it, Python's call: what MPI's adds (in C) do not pay
    local_copy: object  # a copy of n bytes in memory, measured by size, or None
    copy_read_by_peer: object  # one machine: the same into bytes another rank read, or None
    finish: object  # an allreduce's mean pass as measured in situ (a PiecewiseCost), or None
    wire: object  # a compressed message's wire bytes written and read, in situ (WireCost), or None
    machine_copies: int | None  # one machine's ranks: copies its memory moves at once, or None
    costs: dict
    jitter: dict  # pattern -> Jitter of the measured costs (in situ), else {}
    shaping: object
    slowdown: float
    core_groups: tuple  # ((ranks, cores), ...): hosts whose ranks take turns on fewer cores
    time_slice_s: float  # a turn on a core (`sim.cores`)
    over_tcp: bool  # ranks of emulated hosts: one core each, shared fairly there (`sim.cores`)
    stack_cpu: tuple | None  # over TCP: the kernel's CPU seconds a byte sent and received
    switch_s: float  # a compute back on a shared core after others ran: its refill (`sim.cores`)
    poll_wait_s: float  # over TCP: a message seen later per rank past the cores (`sim.cores`)
    eager_bytes: int
    send_overhead_s: float  # LogP's o of an eager Send (measured), else 0
    send_cost: object  # ... a program's, by size, in situ (a PiecewiseCost, slowed), or None
    probe_cost: object  # a program's Recv (probe first) sees a message later, by size, or None
    call_overhead_s: float  # a step inside MPI's collectives under the hot loop's (measured)
    compute: ComputeModel
    faults: FaultSchedule
    collectives: str
    engine: str
    steps_sample: int  # steps.csv and per_node keep every steps_sample-th node
    ghost: str | None
    profile: str | None
    profile_sha256: str | None  # the profile file's content hash (a copy is in the run folder)
    speeds: str
    stragglers: tuple | None
    gap: object = None  # with costs: a rank's seconds a message of a stream (slowed), or None
    nic_gap: object = None  # ... and its NIC's (`sim.network.RoutedNetwork`)

    @property
    def combine(self):
        """What the simulator charges a reduction's combining: the measured cost by size where
        the profile has one, else gamma seconds a byte (`programs.collectives.combined_s`)."""
        return self.reduction if self.reduction is not None else self.gamma

    @property
    def library_combine(self):
        """What the simulator charges a reduction's combining inside a call of MPI's library
        (its own allreduce, reduce): the measured add less Python's call where the profile
        measured both (`InLibrary`), else `combine`."""
        if self.reduction is None or not self.reduction_call_s:
            return self.combine
        return InLibrary(self.reduction, self.reduction_call_s)

    @property
    def hosts(self):
        """Number of hosts the ranks fill."""
        return -(-self.ranks // self.ranks_per_host)

    def ring_link(self, nbytes):
        """(alpha s, beta B/s) of the slowest step of a ring over the ranks in order on a star,
        for messages of ``nbytes``, worked out without making the network (the analytic
        engine's million nodes): ``make_network().ring_link(nbytes)`` there (a test holds them
        equal). Between hosts a step crosses two NICs and the switch; inside a host it shares
        the host's memory with the host's other pairs of that step."""
        assert self.network == "star", "ring_link without a network is the star's"
        if self.ranks == 1:
            return self.latency_s, self.bandwidth_Bps
        links = set()
        if self.hosts > 1:
            links.add((self.latency_s, self.nic_bandwidth_Bps))
        if self.ranks_per_host > 1:
            copies = self.ranks if self.hosts == 1 else self.ranks_per_host - 1
            links.add((self.memory.latency_s, self.memory.concurrent_Bps(copies)))
        return slowest_link(links, nbytes)

    def make_network(self):
        """The `sim.network.RoutedNetwork` of this cluster with no clock yet (the simulator
        attaches its own); ValueError naming the flag for a network that cannot be made."""
        return make_network(
            None,
            self.network,
            self.ranks,
            self.latency_s,
            self.bandwidth_Bps,
            self.costs,
            self.shaping,
            jitter=self.jitter,
            ranks_per_host=self.ranks_per_host,
            memory=self.memory if self.ranks_per_host > 1 else None,
            machine_copies=self.machine_copies,
            nic_bandwidth_Bps=(
                self.nic_bandwidth_Bps if self.nic_bandwidth_Bps != self.bandwidth_Bps else None
            ),
            gap=self.gap,
            nic_gap=self.nic_gap,
        )

    def describe(self):
        """One line on what is simulated (``--verbose``): hosts, cores, network, costs, engine."""
        placed = (
            f"{self.ranks} ranks on {self.hosts} host(s) of {self.ranks_per_host}"
            if self.ranks_per_host > 1
            else f"{self.ranks} ranks, one a host"
        )
        turns = "; ".join(
            f"{len(ranks)} ranks on {cores} core(s), "
            + ("turns on each core's ranks" if self.over_tcp else "fair share")
            + (
                f", the kernel's {1e9 * self.stack_cpu[0]:.2g}+{1e9 * self.stack_cpu[1]:.2g} ns"
                " a TCP byte"
                if self.stack_cpu
                else ""
            )
            + f", {1e3 * eevdf_slice(cores):g} ms slices on {1e3 * self.time_slice_s:g} ms ticks"
            for ranks, cores in self.core_groups[:2]
        )
        costs = f"measured costs {'+'.join(sorted(self.costs))}" if self.costs else "alpha-beta"
        costs += ", a stream's gap and its NIC's" if self.gap is not None else ""
        return (
            f"{placed}{f' ({turns})' if turns else ''}; {self.network}, "
            f"{1e6 * self.latency_s:g} us, {8 * self.bandwidth_Bps / 1e9:g} Gbit/s, {costs}"
            f"{', token buckets' if self.shaping is not None else ''}; mpi {self.mpi}; "
            f"compute {self.compute.kind}; {self.collectives} collectives, {self.engine} engine"
        )

    def header(self):
        """config.json's ``cluster``: what was simulated, each default resolved."""
        compute = self.compute
        return {
            "latency_s": self.latency_s,
            "bandwidth_Bps": self.bandwidth_Bps,
            "network": self.network,
            "ranks_per_host": self.ranks_per_host,
            "hosts": self.hosts,
            "cores_per_host": self.cores_per_host,
            "nic_bandwidth_Bps": self.nic_bandwidth_Bps,
            "memory": {
                "latency_s": self.memory.latency_s,
                "bandwidth_Bps": self.memory.bandwidth_Bps,
                "channels": self.memory.channels,
                "source": self.memory_source,
            }
            if self.ranks_per_host > 1
            else None,
            "profile": self.profile,
            "profile_sha256": self.profile_sha256,
            "mpi": self.mpi,
            "gamma_s_per_byte": self.gamma,
            "reduction_by_size": self.reduction is not None,
            "reduction_call_s": self.reduction_call_s,
            "finish_in_situ": self.finish is not None,
            "wire_in_situ": self.wire is not None,
            "machine_copies": self.machine_copies,
            "copy_read_by_peer": self.copy_read_by_peer is not None,
            "eager_bytes": self.eager_bytes,
            "send_overhead_s": self.send_overhead_s,
            "send_in_situ": self.send_cost is not None,
            "probe_in_situ": self.probe_cost is not None,
            "call_overhead_s": self.call_overhead_s,
            "compute": compute.kind,
            "measured_costs": sorted(self.costs),
            "jitter_mean": {p: round(j.mean, 4) for p, j in self.jitter.items()},
            "token_buckets": self.shaping is not None,
            "network_slowdown": self.slowdown,
            "shared_cores": [
                {"ranks": len(ranks), "cores": cores} for ranks, cores in self.core_groups[:4]
            ],
            "time_slice_s": self.time_slice_s if self.core_groups else None,
            "over_tcp": self.over_tcp if self.core_groups else None,
            "stack_cpu_s_per_byte": list(self.stack_cpu) if self.stack_cpu else None,
            "switch_s": self.switch_s if self.core_groups else None,
            "poll_wait_s": self.poll_wait_s if self.core_groups else None,
            "eevdf_slice_s": (
                [eevdf_slice(cores) for _, cores in self.core_groups[:4]]
                if self.core_groups
                else None
            ),
            "collectives": self.collectives,
            "speeds": list(compute.speeds) if self.ranks <= 10_000 else self.speeds,
            "busy_cores": compute.busy,
            "cold_own_s": compute.cold_own_s,
            "cold_own_code_s": compute.cold_own_code_s,
            # own code timed in the simulator, put at the calibration's speed (its kernel's s)
            "pace_reference_s": compute.pace.reference_s if compute.pace else None,
            "stragglers": self.stragglers,
            "seconds_per_sample": compute.seconds_per_sample,
            "seconds_per_step": compute.seconds_per_step,
            "ghost": self.ghost,
            "steps_sample": self.steps_sample,
            "engine": self.engine,
        }


def add_network_arguments(group):
    """Add the flags that describe the machine (network, hosts, profile) to the argparse
    ``group``: ``sim.run`` and ``sim.osu`` read them the same way (`build_cluster`)."""
    group.add_argument(
        "--latency",
        default=None,
        type=flag_type(parse_seconds),
        help="node-to-node latency, e.g. 5us, 1.5ms (default: the profile's, else 5us)",
    )
    group.add_argument(
        "--bandwidth",
        default=None,
        type=flag_type(parse_bandwidth_Bps),
        help="each NIC's bandwidth, e.g. 10Gbps, 56Gb/s, 12.5GB/s (default: the "
        "profile's, else 10Gbps)",
    )
    group.add_argument(
        "--network",
        default=None,
        metavar="star|fat-tree:K|torus|ring|FILE",
        help="physical network: star (one switch; --latency node to node), "
        "k-ary fat tree, 2-D torus, ring, or a GraphML/edge-list file "
        "(--latency per hop, --bandwidth per link); default: the "
        "profile's, else star",
    )
    group.add_argument(
        "--profile",
        metavar="NAME|FILE.toml",
        help="cluster profile: a preset of sim/profiles/ (polus-like, "
        "lomonosov-2-like, ...) or a file from python -m real.calibrate; "
        "gives the network's and the nodes' defaults",
    )
    group.add_argument(
        "--gamma",
        default=None,
        type=flag_type(_seconds_per_byte),
        metavar="S_PER_BYTE",
        help="the reduction's arithmetic, seconds per byte combined, e.g. 1.2e-10 (default: "
        "the profile's [compute] gamma_s_per_byte, else 0: not charged)",
    )
    group.add_argument(
        "--mpi",
        choices=LIBRARIES,
        default=None,
        help="whose algorithm choices --allreduce mpi (and sim.osu) runs: MPICH's (and Intel "
        "MPI's), Open MPI 4.0's (openmpi) or 4.1's (openmpi-4.1) (default: the profile's "
        "[cluster] mpi, else mpich)",
    )
    group.add_argument(
        "--ranks-per-host",
        type=int,
        default=None,
        metavar="R",
        help="ranks placed on each host (rank r on host r // R): they talk through "
        "its memory, share its NIC and its cores (compute slows by R/cores when R > "
        "cores) (default: the profile's, else 1)",
    )
    group.add_argument(
        "--cores-per-host",
        type=int,
        default=None,
        metavar="C",
        help="cores of a host (default: the profile's [cluster] cores, else R)",
    )
    group.add_argument(
        "--nic-bandwidth",
        default=None,
        type=flag_type(parse_bandwidth_Bps),
        help="each host's links to the network (its NIC, all rails), e.g. 24GB/s "
        "(default: the profile's, else --bandwidth)",
    )
    group.add_argument(
        "--memory-latency",
        default=None,
        type=flag_type(parse_seconds),
        help="one-way latency between two ranks of one host, e.g. 0.4us (default: "
        "the profile's [network.memory], else 0.5us, assumed)",
    )
    group.add_argument(
        "--memory-bandwidth",
        default=None,
        type=flag_type(parse_bandwidth_Bps),
        help="one copy's bandwidth between two ranks of one host, e.g. 6GB/s "
        "(default: the profile's [network.memory], else 5GB/s, assumed)",
    )
    return group


def build_cluster(options, profile, cfg, model_name, flops_per_sample=0):
    """The `Cluster` that ``options`` (sim.run's cluster flags) and ``profile`` (a
    `sim.cluster_profile.ClusterProfile` or None) describe for the run ``cfg`` of
    ``model_name``; ValueError naming the flag (or the profile) for bad input. ``cfg`` None:
    the machine alone (``sim.osu``): compute free, no faults."""
    ranks = options.nodes
    if ranks < 1:
        raise ValueError(f"--nodes must be >= 1, got {ranks}")
    ranks_per_host = _pick(options.ranks_per_host, profile and profile.ranks_per_host, 1)
    cores_per_host = options.cores_per_host
    for flag, value in (("--ranks-per-host", ranks_per_host), ("--cores-per-host", cores_per_host)):
        if value is not None and value < 1:
            raise ValueError(f"{flag} must be >= 1, got {value}")
    network, latency_s, bandwidth_Bps = network_model(options, profile)
    nic_Bps = _pick(options.nic_bandwidth, profile and profile.nic_bandwidth_Bps, bandwidth_Bps)
    memory, memory_source = _memory(options, profile)
    costs = network_costs(options, profile, programs=cfg is not None)
    in_situ = bool(costs) and profile is not None and costs is profile.in_situ  # a program's
    jitter = _jitter(profile, costs, cfg.seed if cfg is not None else 0)  # before any slowing
    groups = core_groups(options, profile, ranks, ranks_per_host)
    slowdown = network_slowdown(options, profile) if costs and not groups else 1.0
    # token buckets from the hot loop's models: over TCP the wire is the time, and the buckets
    # were validated on them (the in-situ ones made 2 emulated hosts' allreduce 16 % too slow)
    shaping = profile.shaping(slowdown) if costs else None
    costs = profile.slowed_costs(slowdown, costs) if costs else costs
    if shaping is not None and options.collectives == "closed-form":
        raise ValueError(
            f"--collectives closed-form: the token-bucket NICs of --profile {options.profile} "
            f"(an emulated cluster) have no closed form; use --collectives message"
        )
    compute, faults = ComputeModel(seconds_per_sample=0.0), FaultSchedule()  # a network alone
    if cfg is not None:
        compute = compute_model(
            options,
            profile,
            cfg.seed,
            model_name,
            flops_per_sample,
            cfg.batch_size,
            ranks_per_host,
            turns=bool(groups),
        )
        faults = FaultSchedule(
            cfg.fault_schedule().check_size(ranks).faults
            + parse_fail_spec(options.fail).check_size(ranks, "--fail").faults
        )
    return Cluster(
        ranks=ranks,
        ranks_per_host=ranks_per_host,
        cores_per_host=cores_per_host or (profile.cores if profile else None),
        network=network,
        latency_s=latency_s,
        bandwidth_Bps=bandwidth_Bps,
        nic_bandwidth_Bps=nic_Bps,
        memory=memory,
        memory_source=memory_source,
        mpi=_pick(options.mpi, profile and profile.mpi, "mpich"),
        gamma=_pick(options.gamma, profile and profile.gamma_s_per_byte, 0.0),
        reduction=_unless_gamma(options, profile and profile.reduction, slowdown),
        reduction_call_s=profile.reduction_call_s * slowdown if profile else 0.0,
        local_copy=_slowed(profile and profile.copy, slowdown),
        copy_read_by_peer=_copy_read_by_peer(profile, costs, shaping, slowdown),
        finish=_unless_gamma(options, profile and profile.finish, slowdown),
        wire=replace(profile.wire, slowdown=slowdown) if profile and profile.wire else None,
        machine_copies=_machine_copies(profile, costs, shaping),
        costs=costs,
        jitter=jitter,
        shaping=shaping,
        slowdown=slowdown,
        core_groups=groups,
        time_slice_s=(profile.time_slice_s if profile else None) or DEFAULT_SLICE_S,
        over_tcp=over_tcp(profile),
        stack_cpu=profile.stack_cpu if groups and over_tcp(profile) and shaping else None,
        switch_s=(profile.switch_seconds(model_name) if profile else 0.0) if groups else 0.0,
        poll_wait_s=profile.poll_wait_s if groups and over_tcp(profile) else 0.0,
        eager_bytes=profile.eager_bytes if costs else 0,
        send_overhead_s=profile.send_overhead_s * slowdown if costs else 0.0,
        send_cost=Slowed(profile.send, slowdown) if in_situ and profile.send else None,
        probe_cost=profile.probe.slowed(slowdown) if in_situ and profile.probe else None,
        call_overhead_s=profile.call_overhead_s * slowdown if costs else 0.0,
        compute=compute,
        faults=faults,
        collectives=options.collectives,
        engine=options.engine,
        steps_sample=options.steps_sample or default_steps_sample(ranks),
        ghost=options.ghost,
        profile=options.profile,
        profile_sha256=profile.sha256 if profile is not None else None,
        speeds=options.speeds,
        stragglers=options.stragglers,
        gap=_slowed(profile.gap, slowdown) if costs and not shaping else None,
        nic_gap=_slowed(profile.nic_gap, slowdown) if costs and not shaping else None,
    )


SAMPLED_NODES = 1000  # steps.csv and per_node hold about this many nodes by default


def default_steps_sample(ranks):
    """Every how many nodes steps.csv and per_node keep one by default: all up to
    ``SAMPLED_NODES``, about that many above (both engines).

    >>> default_steps_sample(1000), default_steps_sample(1001), default_steps_sample(10_000)
    (1, 2, 10)
    """
    return max(1, math.ceil(ranks / SAMPLED_NODES))


def parse_steps_sample(text):
    """``--steps-sample K|all``: K >= 1, or ``all`` (1: every node)."""
    if text == "all":
        return 1
    try:
        every = int(text)
    except ValueError:
        every = 0
    if every < 1:
        raise ValueError(f"expects an integer >= 1 or all, got {text!r}")
    return every


def _seconds_per_byte(text):
    """``--gamma``: a number of seconds per byte, >= 0 (e.g. ``1.2e-10``)."""
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"must be a finite number of seconds per byte >= 0, got {text}")
    return value


def _jitter(profile, costs, seed):
    """Per pattern of the measured ``costs``, the profile's in-situ jitter (seeded by the run's
    seed), when the costs are the in-situ ones; else {}."""
    if not costs or profile is None or costs is not profile.in_situ:
        return {}
    return {  # each pattern's own stream, numbered as the profile lists them
        pattern: Jitter.from_table(profile.in_situ_jitter[pattern], seed=64 * seed + i)
        for i, pattern in enumerate(PATTERNS)
        if pattern in costs and pattern in profile.in_situ_jitter
    }


def _unless_gamma(options, cost, slowdown):
    """A profile's measured reduction cost by size (its add, or an allreduce's finishing pass),
    slowed as the network's costs are for more ranks a core (`_slowed`), unless ``--gamma``
    says otherwise; else None."""
    return None if options.gamma is not None else _slowed(cost, slowdown)


def _slowed(cost, slowdown):
    """A measured cost by size slowed as the network's costs are for more ranks a core, or
    None for None."""
    if cost is None or slowdown == 1.0:
        return cost
    return Slowed(cost, slowdown)


def _machine_copies(profile, costs, shaping):
    """The copies one machine's memory moves at once (`ClusterProfile.memory_copies`,
    rounded) when the ranks are that machine's, charged its measured message costs and no
    token buckets; else None."""
    if not (costs and shaping is None and profile.one_machine and profile.memory_copies):
        return None
    return max(1, round(profile.memory_copies))


def _copy_read_by_peer(profile, costs, shaping, slowdown):
    """A profile's copy into bytes another rank has just read (``[compute.copy_read_by_peer]``,
    slowed as its other costs), where the ranks are the machine it was measured on, charged
    its measured message costs and no token buckets (between hosts no rank reads another's
    memory); else None."""
    if not (profile and costs and shaping is None and profile.one_machine):
        return None
    return _slowed(profile.copy_read_by_peer, slowdown)


def _pick(flag, from_profile, default):
    """A flag's value, else the profile's, else the default."""
    return flag if flag is not None else from_profile if from_profile is not None else default


def _memory(options, profile):
    """(MemoryPath, where it came from) of two ranks of one host: the flags over the profile's
    ``[network.memory]`` over `ASSUMED_MEMORY`."""
    base, source = (
        (profile.memory, "profile") if profile and profile.memory else (ASSUMED_MEMORY, "assumed")
    )
    if options.memory_latency is None and options.memory_bandwidth is None:
        return base, source
    # a flag's rate is the one rate (a profile's cache bound, fitted beside its rate, is left)
    bandwidth_Bps = _pick(options.memory_bandwidth, None, base.bandwidth_Bps)
    total_Bps = base.channels * base.bandwidth_Bps  # the host's memory keeps its total
    return MemoryPath(
        _pick(options.memory_latency, None, base.latency_s),
        bandwidth_Bps,
        max(1, math.floor(total_Bps / bandwidth_Bps)),
    ), "flags"


def network_model(options, profile):
    """(network spec, latency s, bandwidth B/s): the flags, else the profile's, else a star of
    5 us and 10 Gb/s."""
    return (
        _pick(options.network, profile and profile.network, "star"),
        _pick(options.latency, profile and profile.latency_s, DEFAULT_LATENCY_S),
        _pick(options.bandwidth, profile and profile.bandwidth_Bps, DEFAULT_BANDWIDTH_BPS),
    )


def network_costs(options, profile, programs=True):
    """The profile's measured cost models by message pattern (``programs``: a training run's,
    in situ where measured, `ClusterProfile.costs_for`), unless --latency or --bandwidth
    overrides the profile's network, or --network asks for another than the profile's."""
    if (
        profile is None
        or options.latency is not None
        or options.bandwidth is not None
        or (options.network and options.network != profile.network)
    ):
        return {}
    return profile.costs_for(programs)


def core_groups(options, profile, ranks, ranks_per_host):
    """Hosts whose ranks take turns on fewer cores (`sim.cores`): ``((ranks, cores), ...)``,
    each a range of ranks and its host's cores. Every rank of a one-machine profile's run shares
    that machine's ``[cluster] cores`` (unless --ranks-per-host places them on hosts of their
    own); else each host of --ranks-per-host R on --cores-per-host C < R (or the profile's
    cores). An emulated cluster's hosts are all on its one machine: however many ranks each
    holds, the run's ranks share that machine's cores. None for the closed forms and the
    analytic engine, which slow compute by the cores' share instead."""
    if options.collectives != "message" or getattr(options, "engine", "auto") == "analytic":
        return ()
    cores = options.cores_per_host or (profile.cores if profile else None)
    if not cores:
        return ()
    if profile is not None and profile.one_machine and (ranks_per_host == 1 or over_tcp(profile)):
        return ((range(ranks), cores),) if ranks > cores else ()
    if ranks_per_host <= cores:
        return ()
    hosts = (range(h, min(ranks, h + ranks_per_host)) for h in range(0, ranks, ranks_per_host))
    return tuple((host, cores) for host in hosts if len(host) > cores)


def over_tcp(profile):
    """Whether the profile's ranks talk over TCP between emulated hosts on one machine (its
    token-bucket shaper): they keep to one core each, shared fairly there, and hold none in a
    call (`sim.cores`); not ranks that talk through shared memory, which share all the host's
    cores fairly."""
    return bool(profile is not None and profile.shaper)


def network_slowdown(options, profile):
    """How many times more ranks share each core of a one-machine profile in this run than
    when it was measured (its step times' ranks, else 2, the calibration's pair), if more: the
    measured network costs slow by it (`sim.cluster_profile.Slowed`). 1 elsewhere. The run's
    cores are ``--cores-per-host`` where given (as the compute's share takes them), else the
    profile's."""
    if not profile.one_machine or not profile.cores:
        return 1.0
    measured = next(iter(profile.step_times.values())).ranks if profile.step_times else 2
    now = max(1.0, options.nodes / (options.cores_per_host or profile.cores))
    return max(1.0, now / max(1.0, measured / profile.cores))
