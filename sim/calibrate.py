"""``python -m sim.calibrate --from-osu FILE[:RANKSxPER_HOST] ... --out FILE.toml``: a cluster
profile fitted to a site's OSU / IMB tables.

Examples
--------
::

    python -m sim.calibrate --from-osu osu_latency.txt --from-osu osu_bw.txt \\
        --from-osu osu_allreduce.txt:64x32 --out cluster.toml
    python -m sim.osu osu_allgather --profile cluster.toml --ranks 64 --ranks-per-host 32

Why it lives with the simulator: what a collective table says about a host's memory (its copies'
latency, bandwidth and how many move at once) is only seen through the collective's algorithm,
so the fit simulates the table (`sim.osu`) and searches the memory path that reproduces it.
Point-to-point tables are fitted directly (`calibration.costfit`). ``real.calibrate --from-osu``
hands its arguments here.

What each table determines:

- a latency table (``osu_latency``, IMB ``PingPong``): the one-way piecewise alpha-beta model
  of messages between hosts (``[network.oneway]``; also ``sendrecv`` unless IMB ``Sendrecv``
  is given), and ``[network] latency``;
- a bandwidth table (``osu_bw``): ``[network] bandwidth`` (the largest measured rate, a link's
  and a NIC's: one rank a host measured it); ``osu_bibw`` is read and reported, not used;
- ``osu_mbw_mr`` of R > 1 ranks on each of 2 hosts (``FILE:2RxR``: OSU pairs rank r with
  r + R, so every pair crosses): ``[network] nic_bandwidth``, the largest total rate, what a
  host's ranks share going off-host (two rails may exceed one link's rate);
- ``osu_bw`` and ``osu_mbw_mr`` together: ``[network.gap]``, a rank's seconds a message of a
  stream (LogGP's g, from osu_bw's window), and ``[network.nic_gap]``, the NIC's, shared by its
  host's ranks (`fit_gaps`): a window streams at osu_bw's rate and pairs at once share the NIC
  at osu_mbw_mr's, where the latency table's slope held the links (AlaSKA's 1 KiB: 2.5-2.8
  GB/s simulated for 1-32 pairs, 3.6-12.0 measured);
- a collective table (``osu_allreduce``, ``osu_allgather``, ``osu_alltoall``, ``osu_bcast``,
  ``osu_reduce``; IMB's ``Allreduce``, ``Allgather``, ``Alltoall``, ``Bcast`` and ``Reduce``
  fitted as OSU's, `AS_OSU`) of R > 1 ranks a host: ``[network.memory]`` (latency, one copy's
  bandwidth, and total bandwidth = channels x bandwidth), searched to minimise the absolute log
  error of the simulated table over its sizes, as the library's algorithm runs (``--mpi``).
  Absolute, not squared: a library switches protocol at sizes of its own (eager to rendezvous, a
  copy through a buffer to a single copy), and a table's sizes on the far side of a switch it did
  not fit would pull a least-squares rate off the rest; the least absolute error fits the sizes
  that agree, the median's estimator, which is also what the held-out check scores. Such a table
  shows the total far better than how many copies share it: the fit keeps one copy per rank of the
  host unless fewer fit clearly better (`fit_memory`). Where a table grows by 2.5x or more in one
  doubling of its sizes from 4 KiB, and goes on at the slower rate, its host's buffers there
  passed a cache: ``cache`` (the buffers a call of the host's ranks touches at the smaller size,
  `sim.osu.host_working_set`) and ``cache_bandwidth`` (the copy rate times half that growth), and
  the rate is fitted with them in place (`cache_bound`);
- an allreduce or reduce table beside one that only copies (allgather, alltoall, bcast), both
  of R > 1 ranks a host: the memory from the copying ones alone, then ``[compute]
  gamma_s_per_byte`` (the reduction's arithmetic, Thakur, Rabenseifner and Gropp's gamma) from
  the reducing ones, by the same criterion. A reducing table alone fits the memory with the
  arithmetic in its rate.

What it cannot determine it says, with what it assumed.

``--profile FILE.toml`` refines a profile `real.calibrate` measured on an allocation whose ranks
are past its machine's cores over TCP (emulated hosts): the collective tables measured on that
allocation (``real.calibrate`` writes its allreduce beside the profile) fit ``[cluster]
poll_wait_s`` at sizes below 64 KiB (`fit_poll_wait`), and nothing else changes::

    python -m sim.calibrate --profile p.toml --from-osu p.osu_allreduce.txt:4x2 --out p.toml
"""

import dataclasses
import itertools
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import minimize_scalar

from sim.cluster import ASSUMED_MEMORY, build_cluster
from sim.cluster_profile import load_profile
from sim.network import MemoryPath
from sim.osu import (
    WINDOW,
    host_working_set,
    loop_calls,
    machine_options,
    osu_value,
    side_by_side,
    simulate_benchmark,
)
from sim.osu import build_parser as osu_parser
from twinsgd.calibration.costfit import fit_segments
from twinsgd.calibration.osu_tables import TWO_RANKS, read_tables
from twinsgd.cli import OneLineParser
from twinsgd.programs.mpi_choices import LIBRARIES
from twinsgd.run.interrupt import one_line_on_interrupt

LATENCY_TABLES = ("osu_latency", "imb_pingpong", "osu_multi_lat")
SIMULATED = {"osu_allreduce", "osu_allgather", "osu_alltoall", "osu_bcast", "osu_reduce"}
# IMB-MPI1's collectives, fitted as the OSU benchmark of the same call: both report the mean over
# ranks of a rank's time a call; IMB times its calls back to back after two barriers where OSU
# puts one before each call, a difference of a barrier's skew (a latency or so), which the fit's
# sizes (>= FIT_MIN_BYTES, hundreds of microseconds a call on a full host) do not show. IMB's
# Bcast and Reduce move their root from call to call where OSU's stays at rank 0: taken as the
# same mean over ranks (a host's ranks are alike; the root's host changes which host waits)
AS_OSU = {
    "imb_allreduce": "osu_allreduce",
    "imb_allgather": "osu_allgather",
    "imb_alltoall": "osu_alltoall",
    "imb_bcast": "osu_bcast",
    "imb_reduce": "osu_reduce",
    "imb_uniband": "osu_mbw_mr",  # the same pairs, windows and acknowledgements
}
FIT_MIN_BYTES = 65536  # below, a call's time is the library's software and latencies


def fit_profile(tables, mpi="mpich", say=print):
    """The profile document (a dict for TOML) that ``tables`` (`OsuTable` list) determine, and
    ``say`` each parameter's source, or what was assumed. ValueError when no table gives the
    network's latency."""
    tables = [_as_osu(t, say) for t in tables]
    by_bench, in_a_host = {}, []
    for t in tables:
        if t.bench in TWO_RANKS and t.hosts < 2:
            in_a_host.append(t.bench)
            say(
                f"{t.path}: {t.bench} not used: its two ranks shared a host (the job's ranks 0 "
                f"and 1, {t.ranks_per_host} or more a host), so it timed the host's memory, "
                f"not the network"
            )
        else:
            by_bench.setdefault(t.bench, []).append(t)
    latency = next((by_bench[b][0] for b in LATENCY_TABLES if b in by_bench), None)
    if latency is None:
        raise ValueError(
            "--from-osu: needs a point-to-point latency table between two hosts (osu_latency "
            "or IMB PingPong of one rank a host, FILE or FILE:2x1)"
            + (f"; {', '.join(in_a_host)} ran inside one host" if in_a_host else "")
        )
    positive = latency.sizes > 0
    oneway = fit_segments(latency.sizes[positive], latency.seconds[positive])
    sendrecv = oneway
    if "imb_sendrecv" in by_bench:
        t = by_bench["imb_sendrecv"][0]
        sendrecv = fit_segments(t.sizes[t.sizes > 0], t.seconds[t.sizes > 0])
        say(f"sendrecv: fitted to {t.path}")
    else:
        say("sendrecv: no IMB Sendrecv table; taken as the one-way model (full-duplex links)")
    bandwidth_Bps = float(np.max(oneway.bandwidth_Bps))
    if "osu_bw" in by_bench:
        t = by_bench["osu_bw"][0]
        bandwidth_Bps = float(np.max(t.sizes / t.seconds))
        say(f"bandwidth: {bandwidth_Bps / 1e9:.4g} GB/s, the largest rate of {t.path}")
    else:
        say("bandwidth: no osu_bw table; the one-way model's fastest segment")
    say(
        f"oneway: {len(oneway.latency_s)} segment(s) fitted to {latency.path}, every point "
        f"within {100 * oneway.max_rel_error:.1f} %"
    )
    for t in by_bench.get("osu_bibw", []):
        say(f"bidirectional bandwidth: read from {t.path}, not used (the links are full-duplex)")
    nic_Bps = None
    for t in by_bench.get("osu_mbw_mr", []):
        if crosses(t):
            nic_Bps = float(np.max(t.sizes / t.seconds))
            say(
                f"NIC: {nic_Bps / 1e9:.4g} GB/s, the largest rate of {t.path}: its "
                f"{t.ranks_per_host} pairs all cross from one host to the other at once"
            )
        else:
            say(
                f"{t.path}: not used (the NIC shows in osu_mbw_mr of R > 1 ranks on each of 2 "
                f"hosts, FILE:2RxR, every pair crossing)"
            )
    gaps = fit_gaps(by_bench, oneway, max(bandwidth_Bps, nic_Bps or 0.0), say)
    document = {
        "cluster": {
            "name": "fitted to OSU/IMB tables",
            "calibrated": True,
            "source": "sim.calibrate --from-osu " + " ".join(dict.fromkeys(t.path for t in tables)),
            "mpi": mpi,
        },
        "network": {
            "topology": "star",
            "latency": f"{oneway.seconds(1) * 1e6:.6g}us",
            "bandwidth": f"{bandwidth_Bps:.6g}B/s",
            "oneway": oneway.to_dict(),
            "sendrecv": sendrecv.to_dict(),
        },
    }
    if nic_Bps is not None:
        document["network"]["nic_bandwidth"] = f"{nic_Bps:.6g}B/s"
    document["network"] |= {name: cost.to_dict() for name, cost in gaps.items()}
    collectives = []
    for t in tables:
        if t.bench in SIMULATED and t.ranks_per_host > 1:
            collectives.append(t)
        elif t.collective:
            say(f"{t.path}: not used (one rank a host: no host's memory in it)")
    reducing = [t for t in collectives if t.bench in REDUCING]
    copying = [t for t in collectives if t.bench not in REDUCING]
    if reducing and copying:  # the memory from the copies alone, gamma from what is left
        collectives = copying
    if collectives:
        memory, error = fit_memory(document, collectives, mpi)
        document["network"]["memory"] = {
            "latency": f"{memory.latency_s * 1e6:.6g}us",
            "bandwidth": f"{memory.bandwidth_Bps:.6g}B/s",
            "total_bandwidth": f"{memory.bandwidth_Bps * memory.channels:.6g}B/s",
        }
        if memory.cache_bytes:
            document["network"]["memory"] |= {
                "cache": f"{memory.cache_bytes}B",
                "cache_bandwidth": f"{memory.cache_bandwidth_Bps:.6g}B/s",
            }
        document["cluster"]["ranks_per_host"] = collectives[0].ranks_per_host
        say(
            f"memory: {memory.bandwidth_Bps / 1e9:.3g} GB/s a copy, {memory.channels} at once "
            f"(a copy's rate while the host's ranks copy together: a lone copy's is not "
            f"determined by tables of a full host) "
            f"(latency {memory.latency_s * 1e6:.3g} us assumed: not seen at these sizes), "
            f"fitted to "
            f"{', '.join(t.path for t in collectives)} (median |error| {100 * error:.1f} % over "
            f"sizes >= {FIT_MIN_BYTES} B)"
        )
        if memory.cache_bytes:
            say(
                f"memory in cache: where a call's buffers on a host fit "
                f"{memory.cache_bytes / 2**20:.4g} MiB, "
                f"{memory.cache_bandwidth_Bps / 1e9:.3g} GB/s a copy "
                f"({memory.cache_bandwidth_Bps / memory.bandwidth_Bps:.3g}x: the largest growth "
                f"of a doubling of these tables' sizes from {CACHE_MIN_BYTES} B, over 2)"
            )
        else:
            say(
                f"memory in cache: no bound shown (no doubling of these tables' sizes from "
                f"{CACHE_MIN_BYTES} B grows {CACHE_JUMP}x or more, and {CACHE_JUMP / 2:g}x "
                f"more than the library's algorithms grow it in the model); one rate at every size"
            )
    else:
        say(
            f"memory: no collective table of several ranks a host; not determined (sim.run "
            f"assumes {ASSUMED_MEMORY.latency_s * 1e6:g} us, {ASSUMED_MEMORY.bandwidth_Bps / 1e9:g}"
            f" GB/s a copy, {ASSUMED_MEMORY.channels} at once)"
        )
    if reducing and copying:
        gamma, error = fit_gamma(document, memory, reducing, mpi)
        document["compute"] = {"gamma_s_per_byte": float(f"{gamma:.6g}")}
        rate = f"{1e-9 / gamma:.3g} GB/s" if gamma > 0 else "free"
        say(
            f"gamma (the reduction's arithmetic): {gamma * 1e9:.4g} ns a byte combined ({rate}), "
            f"fitted to {', '.join(t.path for t in reducing)} on the memory of "
            f"{', '.join(t.path for t in copying)} (median |error| {100 * error:.1f} % over "
            f"sizes >= {FIT_MIN_BYTES} B)"
        )
    else:
        say(
            "gamma (the reduction's arithmetic): not determined by these tables (it needs a "
            "reducing table, an allreduce or reduce, beside one that only copies, whose memory it "
            "shares), not charged (real.calibrate measures it on a node; --gamma sets it)"
        )
    say("an eager Send's overhead (LogP's o): not in these tables, not charged")
    return document


def _as_osu(table, say):
    """``table``, an IMB-MPI1 table of a call OSU times the same way renamed as OSU's (`AS_OSU`),
    said to ``say``."""
    if table.bench not in AS_OSU:
        return table
    say(f"{table.path}: IMB-MPI1's {table.bench[4:]}, fitted as {AS_OSU[table.bench]}")
    return dataclasses.replace(table, bench=AS_OSU[table.bench])


def crosses(table):
    """Whether an ``osu_mbw_mr`` table's pairs all cross between two hosts at once (R > 1 ranks
    on each: OSU pairs rank r with r + R), so it shows the NIC a host's ranks share."""
    return table.hosts == 2 and 2 * table.ranks_per_host == table.ranks and table.ranks_per_host > 1


GAP_SEGMENTS = 8  # a stream's gap by size: a library's protocol switches bend it more than t(n)


def fit_gaps(by_bench, oneway, line_Bps, say=print):
    """``{"gap": PiecewiseCost, "nic_gap": PiecewiseCost}`` where the tables (by benchmark)
    determine them (`sim.network.RoutedNetwork`'s ``gap`` and ``nic_gap``), else ``{}``: a
    rank's seconds a message of a stream from ``osu_bw``, the NIC's from ``osu_mbw_mr`` of
    several pairs crossing at once (at each size the least over the tables and one pair's:
    the NIC's best). Each is the per-message time that makes the simulated window take what
    OSU timed (`window_gap`), at least the bytes' time at ``line_Bps`` (the link's or the
    NIC's peak, the larger).

    Both or neither: the gap splits a message's time between its sender and the NIC, and
    without the NIC measured its share is a guess. Guessed as one pair's gap, AlaSKA's Intel
    MPI alltoall, predicted from its allreduce, came out 30.8 % off; with the NIC of its
    osu_mbw_mr, 7.4 % (4.3 % with neither: docs/osu.md, "A stream's gap")."""
    crossing = [t for t in by_bench.get("osu_mbw_mr", []) if crosses(t)]
    if "osu_bw" not in by_bench or not crossing:
        say(
            "gap (a rank's seconds a message of a stream, LogGP's g): not fitted (it needs "
            "osu_bw and osu_mbw_mr of several pairs crossing, the NIC's share); a message holds "
            "its links n / beta(n) of the one-way model"
        )
        return {}
    t = by_bench["osu_bw"][0]
    gap = fit_segments(t.sizes, window_gap(t, oneway, line_Bps, pairs=1), max_segments=GAP_SEGMENTS)
    say(
        f"gap (a rank's seconds a message of a stream, LogGP's g): {len(gap.latency_s)} "
        f"segment(s) fitted to the window of {t.path}, every point within "
        f"{100 * gap.max_rel_error:.1f} %"
    )
    sizes = crossing[0].sizes
    for t in crossing:
        if not np.array_equal(t.sizes, sizes):
            say(f"{t.path}: not used for nic_gap (its sizes are not {crossing[0].path}'s)")
    crossing = [t for t in crossing if np.array_equal(t.sizes, sizes)]
    per_table = [window_gap(t, oneway, line_Bps, t.ranks_per_host) for t in crossing]
    one_pair = [gap.seconds(size) for size in sizes]  # a NIC passes one pair's
    nic_gap = fit_segments(sizes, np.min([*per_table, one_pair], axis=0), max_segments=GAP_SEGMENTS)
    say(
        f"nic_gap (the NIC's seconds a message, shared by a host's ranks): "
        f"{len(nic_gap.latency_s)} segment(s) fitted to the least over "
        f"{', '.join(t.path for t in crossing)}, every point within "
        f"{100 * nic_gap.max_rel_error:.1f} %"
    )
    return {"gap": gap, "nic_gap": nic_gap}


def window_gap(table, oneway, line_Bps, pairs):
    """Per size of a bandwidth table (``osu_bw``: one pair; ``osu_mbw_mr``: ``pairs`` crossing
    through one NIC), the seconds a message holds what it streams through so that OSU's
    window takes the time it measured: `sim.osu.WINDOW` messages a pair back to back, the last
    landing its one-way time ``t(n)`` after it began, then a 4-byte reply. The window's
    ``k = WINDOW * pairs`` messages pass one at a time, the senders' mean finish (what OSU
    divides by) ``(k - (pairs + 1) / 2) g + t(n) + t(4)`` after the first began; solved for g,
    and at least ``n / line_Bps``."""
    n = table.sizes.astype(float)
    window_s = WINDOW * pairs * table.seconds  # OSU's rate: n a message over these seconds
    one_way = np.array([oneway.seconds(size) for size in n])
    reply = oneway.seconds(4)
    passing = WINDOW * pairs - (pairs + 1) / 2
    gap = (window_s - one_way - reply) / passing
    gap = np.where(gap > one_way, (window_s - reply) / (passing + 1), gap)  # the gap outlasts t
    return np.maximum(gap, n / line_Bps)


CHANNELS_TOLERANCE = 0.01  # mean |log error| a size by which fewer channels must fit better
CACHE_MIN_BYTES = 4096  # below, a full host's collective is its latencies more than its copies
CACHE_JUMP = 2.5  # a doubling of a table's sizes that costs this much more: past a cache
CACHE_AFTER = 1.8  # ... and the doubling after it this much at least: the slower rate holds
REDUCING = ("osu_allreduce", "osu_reduce")  # tables whose time holds the reduction's arithmetic
COPY_COST_S = (1e-12, 1e-8)  # the search's bounds, seconds a byte copied: 1 TB/s to 0.1 GB/s
GAMMA_MAX_S = 1e-8  # the search's bound: 0.1 GB/s combined, far slower than any CPU adds
POLL_WAIT_MAX_S = 1e-3  # the search's bound: a scheduler's whole time slice a rank
SEARCH_RTOL = 0.005  # the search ends where its next cost is this close to one it simulated
SEARCH_LOSS_TOL = 1e-4  # ... whose mean |log error| a size is within this of the lines' least
SEARCH_SIMULATIONS = 12  # ... or after this many simulations of the tables
NOT_SHOWN = 1e-3  # mean |log error| a size by which a cost must fit better than none (0.1 %)


def cache_bound(tables, model_growth=None):
    """(bytes, ratio): the host's cache as ``tables`` (collectives of several ranks a host)
    show it, its bound and how much faster a copy runs inside it; None where none shows one.

    The one doubling of a table's sizes from `CACHE_MIN_BYTES` whose time grows the most, by
    at least `CACHE_JUMP` (twice the bytes for more than twice the time), after which the next
    doubling still grows by `CACHE_AFTER` or more (the slower rate holds on: not one slow size
    of a protocol switch, which the fit's least absolute error leaves aside): at the smaller
    size the buffers the host's ranks touch together (`sim.osu.host_working_set`) fit, at the
    larger they do not. Moving its bytes on both sides, the call there spends J times the time
    on twice the bytes, so a copy inside the cache runs J / 2 times as fast. On a real cluster
    (AlaSKA and CSD3, Open MPI: docs/osu.md) a copying table grows 2.7-3.9x at one doubling,
    where a node's buffers pass the same bound in all of its tables, and 1.9-2.3x at most
    others. Where two tables show one, the larger jump is taken.

    ``model_growth(table, n)``, if given: how much the model itself grows the table from n to
    2n bytes with no cache (fitted without one). A jump it grows as well is the library's own
    (an algorithm or protocol it switches to at that size, which the model runs too), not a
    cache: only a jump of `CACHE_JUMP` / 2 over the model's growth counts. (Open MPI's
    allgather of 8 ranks, 4 a host, simulated without a cache, grows 2.63x from 4 to 8 KiB.)"""
    best = None
    for t in tables:
        times = dict(zip(t.sizes.tolist(), t.seconds.tolist(), strict=True))
        for n, seconds in times.items():
            grown = times.get(2 * n, 0.0) / seconds
            after = times.get(4 * n, 0.0) / times.get(2 * n, math.inf)
            if (
                n >= CACHE_MIN_BYTES
                and grown >= CACHE_JUMP
                and after >= CACHE_AFTER
                and (best is None or grown > best[0])
                and (model_growth is None or grown / model_growth(t, n) >= CACHE_JUMP / 2)
            ):
                best = (grown, host_working_set(t.bench, n, t.ranks, t.ranks_per_host))
    return None if best is None else (best[1], best[0] / 2)


def fit_memory(document, tables, mpi="mpich"):
    """(MemoryPath, median |relative error|) that best reproduces ``tables`` (collectives of
    several ranks a host) at sizes >= ``FIT_MIN_BYTES`` on the network of ``document``: for
    each count of channels (powers of two up to the ranks a host) the one copy's bandwidth of
    least absolute log error (`least_absolute_log_error` over a copy's seconds a byte; robust
    to a protocol switch inside the table, see the module's notes). At those sizes a copy's
    latency does not show: it stays `ASSUMED_MEMORY`'s.

    Which count of channels: tables of a full host show the memory's total (channels x a copy's
    rate) far better than how it splits, and the fits of different counts are alike (on AlaSKA
    the best and the worst count's mean |log error| a size differ by 0.005 and less). So the
    count is the host's ranks, each copying at an equal share of the total, unless a fewer
    count fits better by more than `CHANNELS_TOLERANCE` a size: the data then say that fewer
    copies at once reach the total. Each count's search starts at the last count's total.

    A cache bound (`cache_bound`) is fitted only where the tables' jump is more than the model
    fitted without one grows there: the rate is searched without a bound first, the jump's two
    sizes simulated with it, and the search run again with the bound where it counts."""
    points = _fit_points(tables)
    if not points:
        raise ValueError(f"--from-osu: no collective sizes >= {FIT_MIN_BYTES} B to fit the memory")
    base, measured = profile_of(document), np.array([s for _, _, s in points])

    def fit(cache_bytes, faster):  # (a rate of 0: no cache bound)
        def memory_of(channels, cost_s):
            return MemoryPath(
                ASSUMED_MEMORY.latency_s, 1.0 / cost_s, channels, cache_bytes, faster / cost_s
            )

        fits = []  # (mean |log error| a size, channels, MemoryPath, log errors)
        most, start_s = max(t.ranks_per_host for t in tables), 1.0 / ASSUMED_MEMORY.bandwidth_Bps
        for channels in (2**k for k in range(int(math.log2(most)) + 1)):

            def times(cost_s, channels=channels):
                memory = memory_of(channels, cost_s)
                calls = [(t, n, base, memory, mpi) for t, n, _ in points]
                return list(side_by_side(simulated_seconds, calls))

            cost_s, logs = least_absolute_log_error(times, measured, *COPY_COST_S, start_s)
            fits.append((float(np.mean(np.abs(logs))), channels, memory_of(channels, cost_s), logs))
            start_s = 2 * cost_s  # twice the copies at once, each at half the rate: the same total
        least = min(fit[0] for fit in fits)
        _, _, memory, logs = max(
            (fit for fit in fits if fit[0] <= least + CHANNELS_TOLERANCE), key=lambda fit: fit[1]
        )
        return memory, logs

    memory, logs = fit(0, 0.0)
    if cache_bound(tables) is not None:  # a jump in the tables: is it the model's own?

        def model_growth(table, nbytes):
            calls = [(table, n, base, memory, mpi) for n in (nbytes, 2 * nbytes)]
            small, large = side_by_side(simulated_seconds, calls)
            return large / small

        bound = cache_bound(tables, model_growth)
        if bound is not None:
            memory, logs = fit(*bound)
    return memory, _median_relative_error(logs)


def fit_gamma(document, memory, tables, mpi="mpich"):
    """(gamma, median |relative error|): the seconds a byte combined (>= 0) of least absolute
    log error over ``tables`` (reducing collectives) at sizes >= ``FIT_MIN_BYTES``, on the
    network of ``document`` and the memory path ``memory`` fitted to tables that only copy.
    A reduction's bytes are copied as well as added, so without a copying table the two are
    one per-byte cost and gamma is not determined (`fit_profile` does not call this then)."""
    points = _fit_points(tables)
    base, measured = profile_of(document), np.array([s for _, _, s in points])

    def times(gamma):
        calls = [(t, n, base, memory, mpi, gamma) for t, n, _ in points]
        return list(side_by_side(simulated_seconds, calls))

    gamma, logs = least_absolute_log_error(times, measured, 0.0, GAMMA_MAX_S, 0.0)
    return gamma, _median_relative_error(logs)


def least_absolute_log_error(times, measured, lower, upper, start):
    """(x, log errors at x): the cost x in [``lower``, ``upper``] (seconds a byte copied or
    combined, seconds a rank waits) whose simulated times ``times(x)`` (seconds, a size each)
    have the least sum of |log(simulated / ``measured``)|, from ``start``, in a few simulations.

    Why not a general 1-D search (a bounded Brent's, before): it simulated every size of the
    tables 15-20 times a cost, and a site's table is slow to simulate (an alltoall of 512
    ranks, 32 a host: about 28 s a size on one core; a fit of its five sizes from 64 KiB took
    hours). A collective's simulated time is near affine in such a cost: it is paid per byte
    (or per rank) on the critical path, whose makeup changes at few costs. So each size's line
    is drawn through the last two costs simulated, the least absolute log error over the lines
    is found without simulating (at each size's root, where its line meets its measurement, or
    on a grid between the bounds, refined), and the cost found is simulated next, until it is
    within `SEARCH_RTOL` of a cost simulated that fits as well as the lines promised (within
    `SEARCH_LOSS_TOL` a size: at a corner of the loss, 0.5 % off can fit worse by 0.2 % a size),
    or is one simulated (where the times are affine, three or four simulations).
    Returned is the best cost simulated, so never worse than any tried; where the lower bound
    is 0, none unless the best fits better by `NOT_SHOWN` a size (a cost the tables do not
    show, as γ from a table rounded to 0.01 µs, stays none)."""
    measured = np.asarray(measured, dtype=float)
    tried = {}  # cost -> simulated times

    def simulate(x):
        tried[x] = np.asarray(times(x), dtype=float)
        return tried[x]

    def loss(x):
        return float(np.sum(np.abs(np.log(tried[x] / measured))))

    grid = np.unique(
        np.concatenate(
            [
                [lower, upper],
                np.linspace(lower, upper, 257),
                np.geomspace(max(lower, upper * 1e-6), upper, 257),
            ]
        )
    )
    if start == lower:
        previous, last = start, upper * 1e-2
    else:  # a step up, or down from the upper bound
        previous, last = start, start * 1.5 if start * 1.5 <= upper else start / 1.5
    simulate(previous)
    simulate(last)
    while len(tried) < SEARCH_SIMULATIONS:
        slope = (tried[last] - tried[previous]) / (last - previous)
        intercept = tried[last] - slope * last
        following, predicted = _least_over_lines(intercept, slope, measured, grid, lower, upper)
        near = [x for x in tried if abs(following - x) <= SEARCH_RTOL * max(x, upper * 1e-6)]
        if following in tried or any(
            loss(x) <= predicted + SEARCH_LOSS_TOL * measured.size for x in near
        ):
            break
        previous, last = last, following
        simulate(following)
    best = min(tried, key=loss)
    if lower == 0.0:  # a cost that fits hardly better than none is not shown by the tables
        if lower not in tried:
            simulate(lower)
        if loss(lower) <= loss(best) + NOT_SHOWN * measured.size:
            best = lower
    return best, np.log(tried[best] / measured)


def _median_relative_error(logs):
    """The median |simulated / measured - 1| of log errors ``logs`` (a size each)."""
    return float(np.median(np.abs(np.expm1(logs))))


def _least_over_lines(intercept, slope, measured, grid, lower, upper):
    """(x, its loss): the cost x in [``lower``, ``upper``] of least sum of
    |log((intercept + slope x) / measured)| (arrays, a size each): the least of the grid's costs
    and each size's root (where the loss has a corner), then refined by a bounded Brent's
    between the candidates either side of it. Why refined: between corners the loss is smooth,
    and where sizes pull against each other its least lies between the grid's costs (5.5 %
    apart on the geometric one); the search stops within `SEARCH_RTOL`, so the surrogate's
    least must be found finer than that.
    Simulates nothing: the lines are the search's surrogate."""

    def losses(costs):  # costs: (n,) -> (n,)
        lines = intercept + np.outer(costs, slope)  # (costs, sizes)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(
                np.all(lines > 0, axis=1),
                np.sum(np.abs(np.log(np.where(lines > 0, lines, 1.0) / measured)), axis=1),
                np.inf,
            )

    with np.errstate(divide="ignore", invalid="ignore"):
        roots = (measured - intercept) / slope
    candidates = np.unique(np.concatenate([grid, roots[np.isfinite(roots)]]))
    candidates = candidates[(candidates >= lower) & (candidates <= upper)]
    values = losses(candidates)
    at = int(np.argmin(values))
    best = (float(candidates[at]), float(values[at]))
    if not np.isfinite(best[1]):
        return best
    # neighbours where every line is positive: the loss is finite and smooth between them
    left = candidates[at - 1] if at > 0 and np.isfinite(values[at - 1]) else candidates[at]
    right = (
        candidates[at + 1]
        if at + 1 < candidates.size and np.isfinite(values[at + 1])
        else candidates[at]
    )
    if left == right:
        return best
    refined = minimize_scalar(
        lambda x: float(losses(np.array([x]))[0]),
        bounds=(float(left), float(right)),
        method="bounded",
        options={"xatol": float(left + right) * 1e-7},
    )
    return (float(refined.x), float(refined.fun)) if refined.fun < best[1] else best


def fit_poll_wait(profile, tables, mpi="mpich"):
    """(poll_wait_s, median |relative error|): ``[cluster] poll_wait_s`` (`sim.cores.Pollers`:
    how much later a rank polling past the machine's cores sees a message, for each rank past
    them) of least absolute log error over ``tables``, collectives measured on the allocation
    that ``profile`` (a `ClusterProfile`) was calibrated on, at sizes below ``FIT_MIN_BYTES``,
    where a call's time is its messages' latencies and the turns its ranks wait for.

    Why from a collective, not the pair that `real.calibrate` times beside pollers: the pair's
    one-way time with the other ranks polling in a barrier gave 4-19 us a rank from one
    calibration to the next on the same 2 x 2 allocation, and the model on it missed OSU's
    small allreduces and broadcasts by 25-45 % either way, while one value fitted both tables
    within 3-10 % (2026-12-03). A collective's ranks poll as the programs' ranks do: all of
    them in the call, waiting for each other."""
    points = [
        (t, int(n), s)
        for t in tables
        for n, s in zip(t.sizes, t.seconds, strict=True)
        if n < FIT_MIN_BYTES
    ]
    if not points:
        raise ValueError(f"no collective sizes below {FIT_MIN_BYTES} B to fit poll_wait_s")

    def times(wait_s):
        calls = [(t, n, profile, mpi, wait_s) for t, n, _ in points]
        return list(side_by_side(_osu_loop_seconds, calls))

    measured = [s for _, _, s in points]
    wait_s, logs = least_absolute_log_error(times, measured, 0.0, POLL_WAIT_MAX_S, 0.0)
    return wait_s, _median_relative_error(logs)


def _osu_loop_seconds(table, nbytes, profile, mpi, wait_s):
    """``table``'s benchmark at ``nbytes`` as `sim.osu` prints it (OSU's loop of calls where
    token buckets keep state), with ``poll_wait_s`` at ``wait_s``: seconds a call."""
    cluster = cluster_for(table, profile, None, mpi)
    cluster = dataclasses.replace(cluster, poll_wait_s=wait_s)
    calls = loop_calls(cluster, table.bench)[0]
    seconds = simulate_benchmark(table.bench, cluster, nbytes, calls, mpi)
    return osu_value(table.bench, seconds, nbytes, calls) * 1e-6


def refine_poll_wait(path, tables, mpi=None, say=print):
    """The profile document at ``path`` (`real.calibrate`'s, of ranks past the machine's cores
    over TCP) with ``[cluster] poll_wait_s`` fitted to ``tables``, collectives measured on the
    same allocation (`fit_poll_wait`); the pair's value kept as ``poll_wait_pair_s`` and the
    fit's median |relative error| as ``poll_wait_error``. ``mpi``: whose algorithms (default:
    the profile's). ValueError (one line) when the profile has no poll_wait_s or no table is
    a collective."""
    import tomllib

    profile = load_profile(path)
    if not profile.poll_wait_s:
        raise ValueError(
            f"--profile {path}: no [cluster] poll_wait_s (its ranks were not past the "
            "machine's cores over TCP): nothing for the tables to fit"
        )
    collectives = [t for t in tables if t.bench in SIMULATED]
    if not collectives:
        raise ValueError(
            "--profile: needs a collective table measured on the same allocation (as "
            "real.calibrate writes it: FILE.osu_allreduce.txt:RANKSxPER_HOST)"
        )
    mpi = mpi or profile.mpi or "mpich"
    wait_s, error = fit_poll_wait(profile, collectives, mpi)
    document = tomllib.loads(profile.source.decode())  # (the bytes read once, by load_profile)
    cluster = document["cluster"]
    cluster.setdefault("poll_wait_pair_s", cluster["poll_wait_s"])  # (refined before: kept)
    cluster["poll_wait_s"] = float(f"{wait_s:.4g}")
    cluster["poll_wait_error"] = round(error, 4)
    say(
        f"poll_wait_s: {cluster['poll_wait_s'] * 1e6:.3g} us a rank past the cores, fitted to "
        f"{', '.join(t.path for t in collectives)} (median |error| {100 * error:.1f} % over "
        f"sizes below {FIT_MIN_BYTES} B; the pair beside pollers gave "
        f"{cluster['poll_wait_pair_s'] * 1e6:.3g} us)"
    )
    return document


def _fit_points(tables):
    """(table, size, seconds) of every row of ``tables`` at sizes >= ``FIT_MIN_BYTES``."""
    return [
        (t, int(n), s)
        for t in tables
        for n, s in zip(t.sizes, t.seconds, strict=True)
        if n >= FIT_MIN_BYTES
    ]


def simulated_seconds(table, nbytes, profile, memory, mpi="mpich", gamma=None):
    """The simulated time of ``table``'s benchmark at ``nbytes`` on ``profile`` with the memory
    path ``memory``, the table's job shape and, if given, ``gamma`` (seconds a byte a reduction
    combines; else the profile's), seconds (the table's own measure)."""
    cluster = cluster_for(table, profile, memory, mpi)
    if gamma is not None:
        cluster = dataclasses.replace(cluster, gamma=gamma, reduction=None)
    seconds = simulate_benchmark(table.bench, cluster, nbytes, 1, mpi)
    return osu_value(table.bench, seconds, nbytes, 1) * 1e-6


def cluster_for(table, profile, memory=None, mpi="mpich"):
    """The `sim.cluster.Cluster` of ``table``'s job shape on ``profile`` (a ClusterProfile),
    read from sim.osu's own flags, so every cluster option takes its default as there."""
    flags = ["osu_latency", "--ranks", str(table.ranks), "--ranks-per-host"]
    flags += [str(table.ranks_per_host), "--profile", profile.path, "--mpi", mpi]
    cluster = build_cluster(machine_options(osu_parser().parse_args(flags)), profile, None, "osu")
    if memory is not None:
        cluster = dataclasses.replace(cluster, memory=memory, memory_source="fit")
    return cluster


def profile_of(document):
    """The `ClusterProfile` of a profile document (written to a temporary file and read back,
    so the fit sees what a user of the profile will)."""
    import tomli_w

    with tempfile.TemporaryDirectory(prefix="twinsgd-osu-") as folder:
        path = Path(folder) / "profile.toml"
        path.write_text(tomli_w.dumps(document))
        return load_profile(str(path))


def _comments_atop(path):
    """The comment lines that open the file at ``path`` (a profile's note on how it was made)."""
    lines = Path(path).read_text().splitlines(keepends=True)
    return "".join(itertools.takewhile(lambda line: line.startswith("#"), lines))


def build_parser():
    parser = OneLineParser(
        prog="python -m sim.calibrate",
        description="Fit a cluster profile to a site's OSU micro-benchmark or IMB-MPI1 tables.",
    )
    parser.add_argument(
        "--from-osu",
        action="append",
        required=True,
        metavar="FILE[:RANKSxPER_HOST]",
        help="an OSU or IMB output file; a collective's with its job's shape, e.g. :64x32",
    )
    parser.add_argument(
        "--mpi",
        choices=LIBRARIES,
        default=None,
        help="whose algorithm choices: MPICH's (and Intel MPI's), Open MPI 4.0's (openmpi) or "
        "4.1's (openmpi-4.1) (default: the --profile's, else mpich)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="FILE.toml",
        help="a profile real.calibrate measured on an allocation whose ranks are past its "
        "machine's cores over TCP: the collective tables measured on that allocation fit its "
        "[cluster] poll_wait_s (sizes below 64 KiB); nothing else changes",
    )
    parser.add_argument("--out", required=True, metavar="FILE.toml", help="the profile to write")
    return parser


@one_line_on_interrupt("python -m sim.calibrate")
def main(argv=None):
    import tomli_w

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        tables = [t for spec in args.from_osu for t in read_tables(spec, say=print)]
        header = ""
        if args.profile is not None:
            document = refine_poll_wait(args.profile, tables, args.mpi)
            header = _comments_atop(args.profile) + (
                f"# [cluster] poll_wait_s: fitted by python -m sim.calibrate --profile to "
                f"{' '.join(args.from_osu)}\n\n"
            )
        else:
            document = fit_profile(tables, args.mpi or "mpich")
        out = Path(args.out)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(header + tomli_w.dumps(document))
        except OSError as err:
            raise ValueError(f"--out {args.out}: cannot write it ({err.strerror or err})") from None
    except ValueError as err:
        parser.error(str(err))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
