"""OSU/IMB tables in (reader, bad input), simulated OSU tables out (against the alpha-beta
formulas), and a profile fitted to a real cluster's tables predicting a collective it was not
fitted to."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from sim.calibrate import fit_profile, profile_of, simulated_seconds
from sim.cluster import build_cluster
from sim.cluster_profile import load_profile
from sim.osu import (
    SHAPED_ITERATIONS,
    build_parser,
    loop_calls,
    machine_options,
    osu_value,
    simulate_benchmark,
)
from twinsgd.calibration.costfit import PiecewiseCost
from twinsgd.calibration.osu_tables import read_table, read_tables
from twinsgd.programs.mpi_choices import allgather_algorithm
from twinsgd.programs.ops import Recv, Send
from twinsgd.run.runlog import Charges

# real clusters' tables beside the data sets (../shared/osu by the Makefile's TWINSGD_DATA)
OSU = (
    Path(
        os.environ.get("TWINSGD_DATA", Path(__file__).resolve().parents[2] / "shared" / "datasets")
    ).parent
    / "osu"
)
needs_osu = pytest.mark.skipif(not OSU.is_dir(), reason=f"{OSU} (real clusters' tables) missing")
ALPHA, BETA = 2e-6, 1e9


def cluster(bench, *flags):
    args = build_parser().parse_args([bench, "--latency", "2us", "--bandwidth", "1GB/s", *flags])
    return build_cluster(machine_options(args), None, None, "osu")


@pytest.mark.parametrize("nbytes", [0, 1, 4096, 1 << 20])
def test_simulated_osu_latency_is_alpha_plus_n_over_beta(nbytes):
    seconds = simulate_benchmark("osu_latency", cluster("osu_latency"), nbytes, iterations=3)
    latency_us = osu_value("osu_latency", seconds, nbytes, 3)
    assert latency_us == pytest.approx((ALPHA + nbytes / BETA) * 1e6, rel=1e-9)


def test_simulated_osu_bw_is_a_window_back_to_back_then_a_reply():
    n = 1 << 16
    seconds = simulate_benchmark("osu_bw", cluster("osu_bw"), n)
    expected = 64 * n / BETA + ALPHA + (ALPHA + 4 / BETA)  # window, last arrival, the reply
    assert seconds[0] == pytest.approx(expected, rel=1e-9)
    assert osu_value("osu_bw", seconds, n, 1) == pytest.approx(64 * n / expected / 1e6)


@pytest.mark.parametrize("bench", ["osu_allgather", "osu_alltoall"])
@pytest.mark.parametrize("ranks", [2, 5, 8])
def test_simulated_block_collectives_on_a_star_take_p_minus_1_steps(bench, ranks):
    """One rank a host, no link shared within a step: (p - 1)(alpha + m / beta) for every rank
    (blocks of 80,000 bytes: MPICH's alltoall is pairwise past 32 KiB, its allgather a ring from
    512 KiB in all, and recursive doubling on 2 ranks is one exchange)."""
    m = 80_000
    seconds = simulate_benchmark(bench, cluster(bench, "--ranks", str(ranks)), m)
    np.testing.assert_allclose(seconds, (ranks - 1) * (ALPHA + m / BETA), rtol=1e-9)


@pytest.mark.parametrize("ranks", [2, 5, 8])
def test_a_linear_alltoall_sends_back_to_back_and_waits_one_latency(ranks):
    """MPICH's medium blocks go all at once: every rank's p - 1 sends leave its NIC back to back,
    to rank + 1, + 2, ... (each round a permutation: no receiver shared), the last arriving
    alpha after: (p - 1) m / beta + alpha."""
    m = 10_000
    seconds = simulate_benchmark("osu_alltoall", cluster("osu_alltoall", "--ranks", str(ranks)), m)
    np.testing.assert_allclose(seconds, (ranks - 1) * m / BETA + ALPHA, rtol=1e-9)


@pytest.mark.parametrize(
    ("mpi", "m", "ranks", "algorithm", "alphas"),
    [
        ("mpich", 1000, 8, "recursive-doubling", 3),
        ("mpich", 1000, 6, "bruck", 3),
        ("openmpi", 10_000, 12, "neighbor-exchange", 6),
    ],
)
def test_allgathers_but_the_ring_take_fewer_steps_for_its_bytes(mpi, m, ranks, algorithm, alphas):
    """MPICH's recursive doubling on a power of two and Bruck's elsewhere for short blocks, Open
    MPI 4.0's neighbour exchange for long ones on an even count: log2 p (or p / 2) latencies and
    the ring's (p - 1) m bytes."""
    assert allgather_algorithm(mpi, m, ranks) == algorithm
    bench = cluster("osu_allgather", "--ranks", str(ranks), "--mpi", mpi)
    seconds = simulate_benchmark("osu_allgather", bench, m, mpi=mpi)
    np.testing.assert_allclose(seconds, alphas * ALPHA + (ranks - 1) * m / BETA, rtol=1e-9)


@pytest.mark.parametrize(("ranks", "steps", "blocks"), [(8, 3, 4), (16, 4, 8)])
def test_a_bruck_alltoall_takes_log_p_steps_of_half_the_blocks(ranks, steps, blocks):
    """Small blocks (MPICH: at most 256 bytes on 8 ranks or more): log2 p steps, each moving the
    blocks whose position has that step's bit set, half of them at a power of two."""
    m = 100
    seconds = simulate_benchmark("osu_alltoall", cluster("osu_alltoall", "--ranks", str(ranks)), m)
    np.testing.assert_allclose(seconds, steps * (ALPHA + blocks * m / BETA), rtol=1e-9)


def test_the_reader_knows_osu_and_imb_headers_and_turns_values_into_seconds(tmp_path):
    bw = tmp_path / "bw.txt"
    bw.write_text(
        "# OSU MPI Bandwidth Test v7.1\n# Size      Bandwidth (MB/s)\n1 2.00\n1024 1000.00\n"
    )
    table = read_table(str(bw))
    assert table.bench == "osu_bw" and not table.collective
    np.testing.assert_allclose(table.seconds, [1 / 2e6, 1024 / 1e9])
    imb = tmp_path / "imb.txt"
    imb.write_text(
        "# Benchmarking Allreduce\n# #processes = 8\n"
        "       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n"
        "            4         1000         1.00         3.00         2.00\n"
        "            8         1000         2.00         4.00         3.00\n\n"
    )
    table = read_table(f"{imb}:8x4")
    assert (table.bench, table.ranks, table.ranks_per_host, table.hosts) == (
        "imb_allreduce",
        8,
        4,
        2,
    )
    np.testing.assert_allclose(table.seconds, [2e-6, 3e-6])  # t_avg
    full = tmp_path / "f.txt"  # osu -f: min, max and iterations after the average
    full.write_text(
        "# OSU MPI Allreduce Latency Test v5.6.2\n"
        "# Size       Avg Latency(us)   Min Latency(us)   Max Latency(us)  Iterations\n"
        "4                       5.47              4.00              7.00        1000\n"
    )
    assert read_table(f"{full}:4x2").seconds.tolist() == pytest.approx([5.47e-6])


def _imb_section(name, processes, rows, columns="t_min[usec]  t_max[usec]  t_avg[usec]"):
    """One section of IMB-MPI1's text: its header, ``# #processes``, then ``(bytes, t)`` rows
    with ``t`` in every time column."""
    width = len(columns.split())
    return (
        f"#{'-' * 63}\n# Benchmarking {name} \n# #processes = {processes} \n"
        f"# ( {64 - processes} additional processes waiting in MPI_Barrier)\n#{'-' * 63}\n"
        f"       #bytes #repetitions  {columns}\n"
        + "".join(f"{n:>13} {1000:>12}" + f" {t:>12.2f}" * width + "\n" for n, t in rows)
        + "\n\n"
    )


def test_a_whole_imb_suite_reads_each_benchmark_at_the_jobs_ranks(tmp_path):
    """IMB-MPI1 run as a whole writes every benchmark into one file, each collective at 2, 4,
    8, ... processes: the section of the job's ranks is read (not the first), PingPong and
    Sendrecv at 2 (the job's ranks 0 and 1: on one host when it has several a host), Uniband
    (osu_mbw_mr's pairs and windows) at the job's ranks, fitted as osu_mbw_mr; an empty call's
    0-byte row and benchmarks without a model are left out, and said."""
    from sim.calibrate import fit_profile

    suite = tmp_path / "imb.txt"
    pingpong = [(0, 1.0), (1024, 2.0)]
    suite.write_text(
        "# List of Benchmarks to run:\n\n# PingPong\n# Sendrecv\n# Allreduce\n# Barrier\n\n"
        + _imb_section("PingPong", 2, pingpong, "t[usec]   Mbytes/sec")
        + _imb_section("Sendrecv", 2, [(4, 3.0)], "t_min[usec] t_max[usec] t_avg[usec] Mbytes/sec")
        + _imb_section("Sendrecv", 4, [(4, 30.0)], "t_min[usec] t_max[usec] t_avg[usec] Mbytes/sec")
        + "".join(
            _imb_section("Allreduce", p, [(0, 0.03), (4, p * 1.0), (8, p * 2.0)]) for p in (2, 4, 8)
        )
        + "".join(
            _imb_section("Uniband", p, [(0, 0.0), (1024, p * 100.0)], "Mbytes/sec Msg/sec")
            for p in (2, 4, 8)
        )
        + _imb_section("Barrier", 8, [(0, 5.0)])
    )
    said = []
    tables = {t.bench: t for t in read_tables(f"{suite}:8x4", say=said.append)}
    assert list(tables) == ["imb_pingpong", "imb_sendrecv", "imb_allreduce", "imb_uniband"]
    uniband = tables["imb_uniband"]  # 4 pairs' total rate, the 0-byte row (no rate) left out
    assert uniband.sizes.tolist() == [1024] and (uniband.ranks, uniband.ranks_per_host) == (8, 4)
    np.testing.assert_allclose(uniband.seconds, [1024 / 800e6])
    allreduce = tables["imb_allreduce"]
    assert allreduce.sizes.tolist() == [4, 8] and (allreduce.ranks, allreduce.hosts) == (8, 2)
    np.testing.assert_allclose(allreduce.seconds, [8e-6, 16e-6])  # the 8-process section's
    assert tables["imb_sendrecv"].seconds.tolist() == pytest.approx([3e-6])
    ping = tables["imb_pingpong"]
    assert (ping.ranks, ping.ranks_per_host, ping.hosts) == (2, 2, 1)
    assert said == [f"{suite}: not read (no model of them here): IMB Barrier"]
    between_hosts = read_tables(f"{suite}:8x1")
    assert [t.hosts for t in between_hosts if t.bench == "imb_pingpong"] == [2]
    with pytest.raises(ValueError, match=r"run at 2, 4, 8 processes, not at 16"):
        read_tables(f"{suite}:16x4")
    with pytest.raises(ValueError, match=r"run at 2, 4, 8 processes: give the job's shape"):
        read_tables(str(suite))
    with pytest.raises(ValueError, match=r"holds 4 tables \(imb_pingpong, imb_sendrecv, imb_"):
        read_table(f"{suite}:8x4")
    latency = tmp_path / "lat.txt"
    latency.write_text("# OSU MPI Latency Test v5.6.2\n# Size Latency (us)\n8 1.5\n65536 9.0\n")
    said.clear()
    document = fit_profile([uniband, read_table(str(latency))], say=said.append)
    assert f"{suite}: IMB-MPI1's uniband, fitted as osu_mbw_mr" in said
    assert document["network"]["nic_bandwidth"] == "8e+08B/s"
    barrier = tmp_path / "barrier.txt"
    barrier.write_text(_imb_section("Barrier", 8, [(0, 5.0)]))
    with pytest.raises(ValueError, match=r"no table of a benchmark read here \(IMB Barrier; read"):
        read_tables(f"{barrier}:8x4")


def test_osu_tables_one_after_another_in_a_job_log_are_each_read(tmp_path):
    """A job's log of OSU runs one after another, with a launcher's lines between them and a
    prompt right after a table (OSU 7's ``# Datatype`` line too): each table ends at its first
    line that is not a row; the same benchmark twice is refused, naming both lines."""
    log = tmp_path / "job.out"
    log.write_text(
        "[node1:123] SET UCX_NET_DEVICES=mlx5_0:1\n\n"
        "# OSU MPI Latency Test v7.5\n# Datatype: MPI_CHAR.\n# Size       Latency (us)\n"
        "0                       1.50\n1024                    2.27\n"
        "[node1:124] SET UCX_NET_DEVICES=mlx5_0:1\n"
        "# OSU MPI Bandwidth Test v7.5\n# Datatype: MPI_CHAR.\n# Size      Bandwidth (MB/s)\n"
        "1                       2.00\n1024                 1000.00\n$\n"
        "# OSU MPI Barrier Latency Test v7.5\n# Avg Latency(us)\n        3.10\n"
    )
    said = []
    latency, bw = read_tables(str(log), say=said.append)
    assert (latency.bench, bw.bench) == ("osu_latency", "osu_bw")
    assert latency.seconds.tolist() == pytest.approx([1.5e-6, 2.27e-6])
    np.testing.assert_allclose(bw.seconds, [1 / 2e6, 1024 / 1e9])
    assert said == [f"{log}: not read (no model of them here): OSU Barrier Latency Test"]
    twice = tmp_path / "twice.out"
    twice.write_text(
        "# OSU MPI Latency Test v7.5\n# Size Latency (us)\n8 1.0\n\n"
        "# OSU MPI Latency Test v7.5\n# Size Latency (us)\n8 1.1\n"
    )
    with pytest.raises(ValueError, match=r"twice.out:5: a second osu_latency table .*line 1"):
        read_tables(str(twice))


def test_a_latency_table_inside_one_host_is_not_taken_for_the_network(tmp_path):
    """IMB's PingPong of a job of several ranks a host ran between two ranks of one host: the
    fit says it is not used, and with no latency table between hosts refuses in one line."""
    from sim.calibrate import fit_profile

    suite = tmp_path / "imb.txt"
    suite.write_text(_imb_section("PingPong", 2, [(0, 0.3), (65536, 5.0)], "t[usec] Mbytes/sec"))
    inside = read_tables(f"{suite}:64x32")
    with pytest.raises(ValueError, match=r"between two hosts .*imb_pingpong ran inside one host"):
        fit_profile(inside, say=lambda _: None)
    latency = tmp_path / "lat.txt"
    latency.write_text("# OSU MPI Latency Test v5.6.2\n# Size Latency (us)\n8 1.5\n65536 9.0\n")
    said = []
    document = fit_profile([*inside, read_table(str(latency))], say=said.append)
    assert any("imb_pingpong not used: its two ranks shared a host" in line for line in said)
    assert (
        document["network"]["latency"]
        == fit_profile([read_table(str(latency))], say=lambda _: None)["network"]["latency"]
    )


@pytest.mark.parametrize(
    ("text", "shape", "match"),
    [
        ("hello\n1 2\n", "", "not OSU or IMB"),
        ("# OSU MPI Latency Test v5\n# Size Latency (us)\n8\n", "", r":3: .*no value"),
        ("# OSU MPI Latency Test v5\n# Size Latency (us)\n8 1.0\n-4 2.0\n", "", r":4: sizes"),
        ("# OSU MPI Latency Test v5\n# Size Latency (us)\n8 1.0\n8 2.0\n", "", r":4: sizes"),
        ("# OSU MPI Latency Test v5\n# Size Latency (us)\n8 0.00\n", "", r":3: the value"),
        ("# OSU MPI Bandwidth Test v5\n# Size Bandwidth (MB/s)\n0 1.0\n", "", r":3: sizes"),
        ("# OSU MPI Latency Test v5\n# Size Latency (us)\n", "", "no rows"),
        ("# OSU MPI Allreduce Latency Test v5\n# Size Avg\n4 1.0\n", "", "RANKSxPER_HOST"),
        ("# OSU MPI Allreduce Latency Test v5\n# Size Avg\n4 1.0\n", ":8x3", "multiple"),
        ("# OSU MPI Allreduce Latency Test v5\n# Size Avg\n4 1.0\n", ":8xy", "RANKSxPER_HOST"),
    ],
)
def test_bad_tables_are_refused_naming_the_file_and_line(tmp_path, text, shape, match):
    path = tmp_path / "t.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as caught:
        read_table(str(path) + shape)
    assert str(path) in str(caught.value)


def test_a_bad_table_exits_2_in_one_line_and_writes_no_profile(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("# OSU MPI Latency Test v5\n# Size Latency (us)\n8 1.0\n4 2.0\n")
    out = tmp_path / "p.toml"
    done = subprocess.run(
        [sys.executable, "-m", "sim.calibrate", "--from-osu", str(bad), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and not out.exists()
    assert len(done.stderr.strip().splitlines()) == 1 and "bad.txt:4" in done.stderr


@needs_osu
@pytest.mark.parametrize("library", ["alaska-ompi", "alaska-impi"])
def test_every_real_table_reads(library):
    for path in sorted((OSU / library).glob("*.txt")):
        shape = ":64x32" if "np64" in path.name else ""
        table = read_table(f"{path}{shape}")
        assert np.all(np.diff(table.sizes) > 0) and np.all(table.seconds > 0)


@needs_osu
def test_the_simulated_osu_latency_reproduces_the_table_it_was_fitted_to():
    tables = [read_table(str(OSU / "alaska-ompi" / "osu_latency_nodes2_ppn1.txt"))]
    profile = profile_of(fit_profile(tables, say=lambda _: None))
    (table,) = tables
    for n, measured in zip(table.sizes[1:], table.seconds[1:], strict=True):
        assert simulated_seconds(table, int(n), profile, None) == pytest.approx(measured, rel=0.05)


@needs_osu
def test_fitted_to_the_allreduce_it_predicts_the_allgather_it_never_saw():
    """Alaska, Open MPI: point-to-point tables and the 64-rank (2 x 32) allreduce in; the
    64-rank allgather out, within 25 % median over sizes >= 64 KiB (the issue's bound)."""
    folder = OSU / "alaska-ompi"
    tables = [
        read_table(str(folder / "osu_latency_nodes2_ppn1.txt")),
        read_table(str(folder / "osu_bw_nodes2_ppn1.txt")),
        read_table(f"{folder / 'osu_allreduce_np64_nodes2_ppn32.txt'}:64x32"),
    ]
    profile = profile_of(fit_profile(tables, say=lambda _: None))
    held_out = read_table(f"{folder / 'osu_allgather_np64_nodes2_ppn32.txt'}:64x32")
    big = held_out.sizes >= 65536
    errors = [
        simulated_seconds(held_out, int(n), profile, profile.memory) / s - 1
        for n, s in zip(held_out.sizes[big], held_out.seconds[big], strict=True)
    ]
    assert np.median(np.abs(errors)) < 0.25, errors


def _ideal_latency():
    """(osu_latency of 2 us + n / 10 GB/s, 1 B to 4 MiB; the profile fitted to it alone): the
    network under the memory tests' synthetic collectives."""
    from twinsgd.calibration.osu_tables import OsuTable

    sizes = 2.0 ** np.arange(0, 23)
    latency = OsuTable("latency", "osu_latency", sizes, 2e-6 + sizes / 10e9, 2, 1)
    return latency, fit_profile([latency], say=lambda _: None)


def test_the_memory_fit_keeps_the_sizes_that_agree_past_a_protocol_switch():
    """A table simulated on a known memory path, one of its five sizes 3x slower (a library's
    protocol switch the model does not have): the fit reproduces the other four exactly. A
    least-squares fit (the one before) spread the outlier over all five: 24.5 % median."""
    from sim.calibrate import fit_memory
    from sim.cluster import ASSUMED_MEMORY
    from sim.network import MemoryPath
    from twinsgd.calibration.osu_tables import OsuTable

    _, document = _ideal_latency()
    base, truth = profile_of(document), MemoryPath(ASSUMED_MEMORY.latency_s, 2e9, 4)
    big = 2 ** np.arange(16, 21)
    table = OsuTable("allgather", "osu_allgather", big, np.ones(big.size), 8, 4)
    seconds = np.array([simulated_seconds(table, int(n), base, truth) for n in big])
    seconds[1] *= 3
    table = OsuTable("allgather", "osu_allgather", big, seconds, 8, 4)
    memory, median = fit_memory(document, [table])
    fitted = np.array([simulated_seconds(table, int(n), base, memory) for n in big])
    errors = np.abs(fitted / seconds - 1)
    assert median < 0.01 and np.sort(errors)[3] < 0.01, errors
    assert errors[1] == pytest.approx(2 / 3, abs=0.01)


def test_a_table_past_its_hosts_cache_fits_the_bound_and_both_rates():
    """An allgather simulated on a memory path whose copies run 3x as fast while a call's
    buffers on a host fit a cache (8 ranks, 4 a host, the bound at 32 KiB): the fit finds the
    bound where the table grows 6.7x in one doubling, the memory's rate past it to 1 %, the
    cache's from that growth to 12 % (J / 2: 3.35 GB/s against 3; the call's latencies are in
    J too), and reproduces the table within 5 % either side."""
    from sim.calibrate import fit_memory
    from sim.cluster import ASSUMED_MEMORY
    from sim.network import MemoryPath
    from sim.osu import host_working_set
    from twinsgd.calibration.osu_tables import OsuTable

    latency, document = _ideal_latency()
    base, bound = profile_of(document), host_working_set("osu_allgather", 2**15, 8, 4)
    truth = MemoryPath(ASSUMED_MEMORY.latency_s, 1e9, 4, bound, 3e9)
    big = 2 ** np.arange(12, 21)
    shape = OsuTable("allgather", "osu_allgather", big, np.ones(big.size), 8, 4)
    seconds = np.array([simulated_seconds(shape, int(n), base, truth) for n in big])
    table = OsuTable("allgather", "osu_allgather", big, seconds, 8, 4)
    memory, median = fit_memory(document, [table])
    assert memory.cache_bytes == bound and memory.channels == 4
    assert memory.bandwidth_Bps == pytest.approx(1e9, rel=0.01)
    assert memory.cache_bandwidth_Bps == pytest.approx(3e9, rel=0.12)
    fitted = np.array([simulated_seconds(table, int(n), base, memory) for n in big])
    assert np.max(np.abs(fitted / seconds - 1)) < 0.05 and median < 0.01
    one_rate = MemoryPath(ASSUMED_MEMORY.latency_s, 1e9, 4)  # without the bound: ~2x too slow
    assert simulated_seconds(table, 2**15, base, one_rate) > 1.8 * seconds[3]
    written = profile_of(fit_profile([latency, table], say=lambda _: None)).memory  # the profile
    assert written.cache_bytes == bound
    assert written.cache_bandwidth_Bps == pytest.approx(memory.cache_bandwidth_Bps, rel=1e-5)


def test_a_jump_the_librarys_own_algorithm_makes_is_not_taken_for_a_cache():
    """Open MPI's allgather of 8 ranks, 4 a host, simulated on one copy rate (no cache) grows
    2.5x or more in one doubling: its algorithm changes there. The fit, which runs the same
    algorithm, finds no cache bound, and the rate to 1 %; `cache_bound` alone would take one."""
    from sim.calibrate import cache_bound, fit_memory
    from sim.cluster import ASSUMED_MEMORY
    from sim.network import MemoryPath
    from twinsgd.calibration.osu_tables import OsuTable

    _, document = _ideal_latency()
    base, truth = profile_of(document), MemoryPath(ASSUMED_MEMORY.latency_s, 1e9, 4)
    big = 2 ** np.arange(10, 21)
    shape = OsuTable("allgather", "osu_allgather", big, np.ones(big.size), 8, 4)
    seconds = [simulated_seconds(shape, int(n), base, truth, "openmpi") for n in big]
    table = OsuTable("allgather", "osu_allgather", big, np.array(seconds), 8, 4)
    assert cache_bound([table]) is not None  # the table's own jump
    memory, median = fit_memory(document, [table], "openmpi")
    assert memory.cache_bytes == 0 and median < 0.01
    assert memory.bandwidth_Bps == pytest.approx(1e9, rel=0.01)


@pytest.mark.parametrize(
    "growth, expected",
    [
        ({2**14: 3.0}, (32 * 65 * 2**14, 1.5)),  # the bound past 16 KiB, copies 1.5x in it
        ({2**14: 3.0, 2**17: 2.6}, (32 * 65 * 2**14, 1.5)),  # the larger of two
        ({2**14: 6.0, 2**15: 0.7}, None),  # one slow size (a protocol switch), not a bound
        ({2**10: 3.0}, None),  # below CACHE_MIN_BYTES: latencies, not copies
        ({2**19: 3.0}, None),  # at the last doubling: whether the slower rate holds is unseen
        ({2**14: 2.4}, None),  # within what sizes grow elsewhere
    ],
)
def test_the_cache_bound_is_the_one_doubling_a_table_grows_most_past_twice(growth, expected):
    """`cache_bound` on an allgather of 64 ranks, 32 a host, growing 2x a doubling of its sizes
    (1 KiB to 1 MiB) but where ``growth`` says."""
    from sim.calibrate import cache_bound
    from twinsgd.calibration.osu_tables import OsuTable

    sizes = 2 ** np.arange(10, 21)
    seconds = [1e-4]
    for n in sizes[:-1]:
        seconds.append(seconds[-1] * growth.get(int(n), 2.0))
    table = OsuTable("allgather", "osu_allgather", sizes, np.array(seconds), 64, 32)
    found = cache_bound([table])
    if expected is None:
        assert found is None
    else:
        assert found[0] == expected[0] and found[1] == pytest.approx(expected[1])


@settings(max_examples=60, deadline=None)
@example(  # the least at a corner 1.3 % from the cost found, which fit worse by 0.2 % a size
    sizes=[(0.0003793390638914581, 1448991.0, 0.0), (1e-06, 22718.0, 0.375)],
    truth=7.415244990171894e-10,
    start=1e-11,
    kink=6.026027529810697e-10,
)
@example(  # CI's: the least between the grid's costs (and the test after this one)
    sizes=[
        (0.0008320212806974164, 8245047.0, 0.0),
        (0.0008320212806974164, 8245035.0, 0.0),
        (0.00019851647926297068, 2728658.0, 0.0),
        (0.0001503631678982681, 8918531.0, 0.5),
    ],
    truth=1e-11,
    start=1e-11,
    kink=0.0,
)
@given(
    st.lists(
        st.tuples(st.floats(1e-6, 1e-3), st.floats(1e4, 1e7), st.floats(-0.5, 0.5)),
        min_size=1,
        max_size=8,
    ),
    st.floats(1e-11, 1e-9),
    st.floats(1e-11, 1e-8),
    st.floats(0.0, 1e-8),
)
def test_the_search_over_affine_times_is_as_good_as_a_dense_grid_in_few_simulations(
    sizes, truth, start, kink
):
    """Times affine in the cost, ``a + b x`` a size (seconds; b: bytes on the critical path),
    measured at a true cost give or take each size's own factor (e^-0.5..e^0.5: noise and
    protocol switches), and a second cost paid only past a kink (the critical path changing):
    within 1 % of the search's cost (it stops within 0.5 % of a cost it simulated) lies one as
    good as the best of a dense grid (20,000 costs), to `SEARCH_LOSS_TOL` a size, and it
    simulated the tables at most `SEARCH_SIMULATIONS` times, at most 6 when affine."""
    from sim.calibrate import (
        COPY_COST_S,
        SEARCH_LOSS_TOL,
        SEARCH_SIMULATIONS,
        least_absolute_log_error,
    )

    a, b, off = (np.array(column) for column in zip(*sizes, strict=True))
    measured = (a + b * truth) * np.exp(off)
    calls = []

    def simulated(x):  # x: a cost, or costs (a column of them)
        return a + b * x + 2 * b * np.maximum(0.0, x - kink) * (kink > 0)

    def times(x):
        calls.append(x)
        return simulated(x)

    def loss(x):  # a cost's, or each cost's of a column
        return np.sum(np.abs(np.log(simulated(x) / measured)), axis=-1)

    found, logs = least_absolute_log_error(times, measured, *COPY_COST_S, start)
    assert COPY_COST_S[0] <= found <= COPY_COST_S[1]
    assert len(calls) <= (SEARCH_SIMULATIONS if kink else 6)
    assert np.sum(np.abs(logs)) == pytest.approx(loss(found))
    best = np.min(loss(np.geomspace(*COPY_COST_S, 20_000)[:, None]))
    window = (found / 1.01, min(found * 1.01, COPY_COST_S[1]))  # its least loss: on a grid
    near = minimize_scalar(loss, bounds=window, method="bounded", options={"xatol": 1e-20})
    finer = np.min(loss(np.linspace(*window, 4001)[:, None]))  # 10x the dense grid's, and Brent's
    assert min(near.fun, finer, loss(found)) <= best + SEARCH_LOSS_TOL * len(sizes)


def test_the_lines_least_between_the_grids_costs_is_found_not_the_grids_nearest():
    """CI's example (2026-12-04): four sizes' lines pulling against each other, so the least
    absolute log error is smooth and lies between two costs of the search's grid (5.5 % apart):
    the lines' least is found to 1e-12 of a fine grid's around it, where the grid's best cost
    misses it by 1e-8 (which the search's stopping rule then cannot see)."""
    from sim.calibrate import COPY_COST_S, _least_over_lines

    a = np.array([0.0008320212806974164, 0.0008320212806974164, 0.00019851647926297068])
    a = np.append(a, 0.0001503631678982681)  # seconds at cost 0
    b = np.array([8245047.0, 8245035.0, 2728658.0, 8918531.0])  # bytes on the critical path
    measured = (a + b * 1e-11) * np.exp([0.0, 0.0, 0.0, 0.5])
    lower, upper = COPY_COST_S
    grid = np.unique(np.geomspace(upper * 1e-6, upper, 257))

    def loss(x):
        return np.sum(np.abs(np.log((a + np.outer(x, b)) / measured)), axis=-1)

    found, its_loss = _least_over_lines(a, b, measured, grid, lower, upper)
    fine = np.linspace(found / 1.06, found * 1.06, 200_001)
    assert its_loss == pytest.approx(loss(np.array([found]))[0], rel=1e-12)
    assert its_loss <= np.min(loss(fine)) + 1e-12
    assert np.min(loss(grid)) > its_loss + 1e-9  # the grid alone: not the least


_SIDE_BY_SIDE_FIT = """
import json, os, sys
import numpy as np
from sim.calibrate import fit_profile, profile_of, simulated_seconds
from sim.cluster import ASSUMED_MEMORY
from sim.network import MemoryPath
from twinsgd.calibration.osu_tables import OsuTable

sizes = 2.0 ** np.arange(0, 23)
latency = OsuTable("latency", "osu_latency", sizes, 2e-6 + sizes / 10e9, 2, 1)
base = profile_of(fit_profile([latency], say=lambda _: None))
truth, big = MemoryPath(ASSUMED_MEMORY.latency_s, 2e9, 4), 2 ** np.arange(16, 20)

def table(bench):
    shape = OsuTable(bench, f"osu_{bench}", big, np.ones(big.size), 8, 4)
    seconds = [simulated_seconds(shape, int(n), base, truth, "mpich", 3e-10) for n in big]
    return OsuTable(bench, f"osu_{bench}", big, np.array(seconds) * 1.1, 8, 4)

os.sched_getaffinity = lambda _: set(range(int(sys.argv[1])))
if sys.argv[2:] == ["mpi"]:
    from real.mpi import MPI  # initialized at import, a singleton
forks = []
os.register_at_fork(after_in_parent=lambda: forks.append(1))
document = fit_profile([latency, table("allgather"), table("allreduce")], say=lambda _: None)
print(json.dumps({"document": document, "forks": len(forks)}))
"""


def test_a_fit_side_by_side_on_several_cores_gives_the_numbers_of_one_core():
    """The memory and gamma fitted with each size simulated in a forked process of its own (4
    cores) are those fitted one size after the other (1 core), to the last bit; a process
    with MPI initialized forks none (fork after MPI_Init is undefined). (In fresh interpreters:
    this one may hold MPI, initialized by an earlier test.)"""
    import json

    def fit(cores, *mpi):
        done = subprocess.run(
            [sys.executable, "-c", _SIDE_BY_SIDE_FIT, str(cores), *mpi],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    several, one, with_mpi = fit(4), fit(1), fit(4, "mpi")
    assert several["forks"] > 0 and one["forks"] == 0 and with_mpi["forks"] == 0
    assert several["document"] == one["document"] == with_mpi["document"]
    assert several["document"]["compute"]["gamma_s_per_byte"] > 0


@pytest.mark.parametrize("bench", ["allgather", "allreduce"])
@pytest.mark.parametrize("channels", [1, 2, 4])
def test_a_full_hosts_table_does_not_tell_the_count_of_copies_and_the_fit_keeps_its_ranks(
    bench, channels
):
    """Tables simulated with 1, 2 and 4 copies at once (2 GB/s each) on 8 ranks, 4 a host: the
    fit with one copy per rank of the host reproduces every one of them within 1 %, so the
    table cannot tell the counts apart, and the fit takes the host's ranks (`fit_memory`)."""
    from sim.calibrate import fit_memory
    from sim.cluster import ASSUMED_MEMORY
    from sim.network import MemoryPath
    from twinsgd.calibration.osu_tables import OsuTable

    _, document = _ideal_latency()
    base = profile_of(document)
    truth = MemoryPath(ASSUMED_MEMORY.latency_s, 2e9, channels)
    big = 2 ** np.arange(16, 21)
    shape = OsuTable(bench, f"osu_{bench}", big, np.ones(big.size), 8, 4)
    seconds = np.array([simulated_seconds(shape, int(n), base, truth) for n in big])
    memory, median = fit_memory(document, [OsuTable(bench, f"osu_{bench}", big, seconds, 8, 4)])
    assert memory.channels == 4
    assert median < 0.01


@pytest.mark.parametrize("reducing", ["allreduce", "reduce"])
@pytest.mark.parametrize("gamma", [0.0, 2.5e-10])
def test_gamma_is_fitted_from_an_allreduce_beside_a_table_that_only_copies(gamma, reducing):
    """An allgather and an allreduce (or a reduce) simulated on one memory path (2 GB/s, 4
    copies) with the reduction's arithmetic at gamma: the memory is fitted to the allgather
    alone, then gamma to the reducing table, within 1 % (0 stays 0); with the reducing table
    alone it is not determined."""
    from sim.cluster import ASSUMED_MEMORY
    from sim.network import MemoryPath
    from twinsgd.calibration.osu_tables import OsuTable

    latency, document = _ideal_latency()
    base = profile_of(document)
    truth = MemoryPath(ASSUMED_MEMORY.latency_s, 2e9, 4)
    big = 2 ** np.arange(16, 21)

    def table(bench):
        shape = OsuTable(bench, f"osu_{bench}", big, np.ones(big.size), 8, 4)
        seconds = [simulated_seconds(shape, int(n), base, truth, "mpich", gamma) for n in big]
        return OsuTable(bench, f"osu_{bench}", big, np.array(seconds), 8, 4)

    said = []
    document = fit_profile([latency, table("allgather"), table(reducing)], say=said.append)
    assert document["compute"]["gamma_s_per_byte"] == pytest.approx(gamma, rel=0.01, abs=1e-13)
    assert any(line.startswith("gamma (the reduction's arithmetic): ") for line in said)
    alone = fit_profile([latency, table(reducing)], say=lambda _: None)
    assert "compute" not in alone


@pytest.mark.parametrize("bench", ["allgather", "alltoall", "bcast", "allreduce", "reduce"])
def test_imb_collectives_fit_the_memory_as_the_osu_benchmark_of_the_same_call(tmp_path, bench):
    """An IMB-MPI1 table (its own text) of a collective simulated on a known memory path (2 GB/s
    a copy, 4 at once; 8 ranks, 4 a host) fits the same memory as the OSU table of the same
    numbers, within 1 % of the truth; a collective of one rank a host is said to be unused."""
    from sim.cluster import ASSUMED_MEMORY
    from sim.network import MemoryPath
    from twinsgd.calibration.osu_tables import OsuTable

    latency, document = _ideal_latency()
    base = profile_of(document)
    truth = MemoryPath(ASSUMED_MEMORY.latency_s, 2e9, 4)
    big = 2 ** np.arange(16, 21)
    shape = OsuTable(bench, f"osu_{bench}", big, np.ones(big.size), 8, 4)
    seconds = [simulated_seconds(shape, int(n), base, truth) for n in big]
    name = {
        "allgather": "Allgather",
        "alltoall": "Alltoall",
        "bcast": "Bcast",
        "allreduce": "Allreduce",
        "reduce": "Reduce",
    }[bench]
    imb = tmp_path / "imb.txt"
    imb.write_text(
        f"# Benchmarking {name}\n# #processes = 8\n"
        "       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n"
        + "".join(
            f"{n:>13} {1000:>12} {1.0:>12.2f} {1e7:>12.2f} {s * 1e6:>12.4f}\n"
            for n, s in zip(big, seconds, strict=True)
        )
    )
    said = []
    table = read_table(f"{imb}:8x4")
    fitted = fit_profile([latency, table], say=said.append)
    osu = fit_profile(
        [latency, OsuTable("osu", f"osu_{bench}", big, table.seconds, 8, 4)], say=lambda _: None
    )
    assert fitted["network"]["memory"] == osu["network"]["memory"]
    assert float(fitted["network"]["memory"]["total_bandwidth"][:-3]) == pytest.approx(
        8e9, rel=0.01
    )
    assert any(f"fitted as osu_{bench}" in line for line in said)
    lone = OsuTable("lone", f"osu_{bench}", big, np.array(seconds), 2, 1)
    said.clear()
    fit_profile([latency, lone], say=said.append)
    assert any(line.startswith("lone: not used") for line in said)


def _measured_cost(alpha_s, beta_Bps):
    """A profile's measured cost table of one alpha-beta segment (as `real.calibrate` fits)."""
    from twinsgd.calibration.costfit import PiecewiseCost

    nan = (float("nan"), float("nan"))
    return PiecewiseCost(
        min_bytes=(0.0,),
        max_bytes=(2.0**24,),
        latency_s=(alpha_s,),
        bandwidth_Bps=(beta_Bps,),
        latency_ci_s=(nan,),
        bandwidth_ci_Bps=(nan,),
        max_rel_residual=(0.0,),
    ).to_dict()


def _emulated_profile(tmp_path, rate_Bps, burst_bytes, machine_Bps=240e6):
    """A profile of two emulated hosts on token buckets (as `real.calibrate` writes one on
    `real.cluster`): one-way 12 us + n / ``machine_Bps`` while tokens last, every Send eager."""
    import tomli_w

    cost = _measured_cost(12e-6, machine_Bps)
    path = tmp_path / "emulated.toml"
    path.write_text(
        tomli_w.dumps(
            {
                "cluster": {"name": "emulated", "cores": 2},
                "network": {
                    "topology": "star",
                    "latency": "12us",
                    "bandwidth": "119MB/s",
                    "eager_bytes": 2**22,
                    "oneway": cost,
                    "sendrecv": cost,
                    "shaper": {"rates_Bps": [rate_Bps], "bursts_bytes": [burst_bytes]},
                },
            }
        )
    )
    return str(path)


def test_simulated_collective_on_token_buckets_runs_at_osus_steady_state(tmp_path):
    """OSU's loop of broadcasts from a drained bucket: the root's eager Send returns at once, so
    each call's bytes can only pass at the bucket's rate, and the receiver waits a whole
    n / rate a call (550 us for 64 KiB at 1 Gbit/s, measured 556 on real.cluster); the first
    call, from a full bucket, passes at the machine's speed. On a network without buckets the
    loop is one call."""
    rate, burst, n = 125e6, 125_000, 2**16
    profile = _emulated_profile(tmp_path, rate, burst)
    args = build_parser().parse_args(["osu_bcast", "--profile", profile])
    shaped = build_cluster(machine_options(args), load_profile(profile), None, "osu")
    assert loop_calls(shaped, "osu_bcast", nbytes=n) == (SHAPED_ITERATIONS, 10)  # OSU's skip
    assert loop_calls(cluster("osu_bcast"), "osu_bcast") == (1, 1)  # a network: barrier's skew
    efficiency = shaped.shaping.patterns["oneway"].efficiency
    steady = simulate_benchmark("osu_bcast", shaped, n, iterations=10) / 10
    assert steady[0] == 0.0  # eager: the root never waits
    assert steady[1] == pytest.approx(n / efficiency / rate, rel=0.01)
    assert steady[1] > 1.8 * (12e-6 + n / 240e6)  # a full bucket's call: the machine's speed
    table_us = osu_value("osu_bcast", steady, n, 1)  # the mean over ranks
    assert table_us == pytest.approx(n / efficiency / rate / 2 * 1e6, rel=0.01)


@pytest.mark.parametrize("bench", ["osu_latency", "osu_bcast"])
def test_a_small_message_loop_on_token_buckets_is_timed_after_osus_own_warm_up(tmp_path, bench):
    """8 KiB back and forth over 125 MB/s buckets of 125 KB on a machine that moves it at 1
    GB/s: a full bucket passes a call at the machine's speed, and only OSU's own warm-up (1,000
    round trips, 200 broadcasts) drains it to its rate, where a host sends 8 KiB a round trip
    (one way n / rate / 2; a broadcast n / rate a call to its receiver, the mean over the 2
    ranks half that): 32.8 us, as `real.cluster` measured (34.7 us one way, 35.3 a broadcast);
    after the collectives' old 5 warm-up calls the broadcast took 17 us."""
    from sim.osu import _point_to_point

    rate, burst, n = 125e6, 125_000, 8192
    profile = _emulated_profile(tmp_path, rate, burst, machine_Bps=1e9)
    args = build_parser().parse_args([bench, "--profile", profile])
    shaped = build_cluster(machine_options(args), load_profile(profile), None, "osu")
    efficiency = shaped.shaping.patterns["oneway"].efficiency
    steady = osu_value(bench, simulate_benchmark(bench, shaped, n, 10), n, 10)
    assert steady == pytest.approx(n / efficiency / rate / 2 * 1e6, rel=0.02)
    assert loop_calls(shaped, bench, nbytes=n)[1] >= 200
    assert loop_calls(shaped, bench, nbytes=2 * n)[1] <= 100
    if bench == "osu_latency":  # the first round trips, from full buckets
        first = osu_value(bench, _point_to_point(bench, shaped, n, 10, "mpich"), n, 10)
        assert first < 0.7 * steady


@pytest.mark.parametrize("nbytes", [0, 1000, 100_000])
def test_simulated_bcast_through_a_network_carries_the_barriers_skew(nbytes):
    """2 ranks on a star, no eager limit measured (a send is done when its bytes have left):
    the root leaves each call after n / beta and is first into the barrier, so the receiver
    leaves the barrier a latency before the root does and waits 2 alpha + n / beta a call."""
    seconds = simulate_benchmark("osu_bcast", cluster("osu_bcast"), nbytes)
    np.testing.assert_allclose(seconds, [nbytes / BETA, 2 * ALPHA + nbytes / BETA], rtol=1e-9)


@pytest.mark.parametrize("mpi", ["mpich", "openmpi"])
def test_simulated_bcast_is_the_librarys_long_message_one(mpi):
    """1 MiB to 16 ranks on a star: a binomial tree would keep the root sending log2(16) n / beta
    (4.2 ms at 1 GB/s); MPICH's scatter + ring allgather and Open MPI's pipeline in 8 KiB
    segments move about n / beta a rank, and every rank ends within 2.2 n / beta."""
    n = 1 << 20
    args = build_parser().parse_args(
        ["osu_bcast", "--latency", "2us", "--bandwidth", "1GB/s", "--ranks", "16", "--mpi", mpi]
    )
    seconds = simulate_benchmark(
        "osu_bcast", build_cluster(machine_options(args), None, None, "osu"), n, mpi=mpi
    )
    assert seconds.max() < 2.2 * n / BETA < math.log2(16) * n / BETA


def test_an_eager_send_keeps_its_sender_for_logps_o(tmp_path):
    """A profile's measured ``overhead_s`` (LogP's o) on an eager Send: the sender is busy o,
    charged as comm, while the message arrives at the measured one-way time (which holds o)."""

    from sim.backend import Simulator
    from sim.compute import ComputeModel

    measured = _measured_cluster(tmp_path, "osu_latency", {"overhead_s": 2e-6})
    assert measured.send_overhead_s == 2e-6 and measured.header()["send_overhead_s"] == 2e-6
    done = {}

    def program(rank):
        buf = np.zeros(100, np.uint8)
        if rank == 0:
            yield Send(dest=1, payload=buf)
        else:
            yield Recv(source=0, buf=buf)
        done[rank] = simulator.env.now

    class Log(Charges):
        comm_s = 0.0

        def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
            self.comm_s += seconds if kind == "comm" else 0.0

        def end_step(self, *args):
            """No steps here."""

    logs = [Log() for _ in range(2)]
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    simulator = Simulator(
        nodes,
        logs,
        measured.latency_s,
        measured.bandwidth_Bps,
        ComputeModel(seconds_per_sample=0.0),
        "message",
        measured.make_network(),
        eager_bytes=measured.eager_bytes,
        send_overhead_s=measured.send_overhead_s,
    )
    simulator.run([program(r) for r in range(2)])
    assert done[0] == pytest.approx(2e-6, rel=1e-12)
    assert done[1] == pytest.approx(5e-6 + 100 / 1e9, rel=1e-12)
    assert logs[0].comm_s == pytest.approx(2e-6, rel=1e-12)


@pytest.mark.parametrize("collectives", ["message", "closed-form"])
def test_mpis_own_allreduce_pays_one_calls_overhead_its_steps_none(collectives):
    """``call_overhead_s`` c: the measured alpha holds one mpi4py call, so MPI's own allreduce
    (one call, its steps inside MPI) takes c + sum over steps of (alpha - c + m / beta); ours,
    a call a step, keeps alpha. 2 ranks, 64 floats, MPICH: Rabenseifner's two exchanges of
    n / 2; 1 float: recursive doubling's one. Both engines agree."""
    from sim.backend import Simulator
    from sim.compute import ComputeModel
    from twinsgd.programs.ops import Allreduce

    alpha, beta, c = 10e-6, 1e9, 3e-6

    def allreduce(algo, floats):
        ended = {}

        def program(rank):
            yield Allreduce(np.ones(floats, np.float32), op="sum", algo=algo)
            ended[rank] = simulator.env.now

        class Log(Charges):
            comm_s = 0.0

            def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
                self.comm_s += seconds if kind == "comm" else 0.0

        logs = [Log() for _ in range(2)]
        nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
        simulator = Simulator(
            nodes, logs, alpha, beta, ComputeModel(seconds_per_sample=0.0), collectives,
            call_overhead_s=c,
        )  # fmt: skip
        simulator.run([program(r) for r in range(2)])
        assert logs[0].comm_s == pytest.approx(ended[0], rel=1e-12)  # all of it comm
        return ended[0]

    n = 64 * 4
    assert allreduce("mpi", 64) == pytest.approx(c + 2 * (alpha - c + n / 2 / beta), rel=1e-12)
    assert allreduce("mpi", 1) == pytest.approx(c + (alpha - c + 4 / beta), rel=1e-12)
    assert allreduce("ring", 64) == pytest.approx(2 * (alpha + n / 2 / beta), rel=1e-12)


def test_mpis_barrier_sends_its_rounds_after_the_first_from_inside_the_call():
    """The entry barrier before a collective is MPI's Barrier, one call: of its ceil(log2 4) =
    2 rounds of empty messages the first costs alpha, the second alpha - c; all of it wait."""
    from sim.backend import Simulator
    from sim.compute import ComputeModel
    from twinsgd.programs.ops import Allreduce

    alpha, c = 10e-6, 3e-6
    waited = {}

    class Log(Charges):
        def charge(self, kind, seconds, bytes_sent=0, bytes_recv=0):
            if kind == "wait":
                waited[self] = waited.get(self, 0.0) + seconds

    def program(rank):
        yield Allreduce(np.ones(4, np.float32), op="sum", algo="ring")  # equal chunks

    logs = [Log() for _ in range(4)]
    nodes = [SimpleNamespace(rank=r, size=4, reporter=0) for r in range(4)]
    simulator = Simulator(
        nodes, logs, alpha, 1e9, ComputeModel(seconds_per_sample=0.0), entry_barrier=True,
        call_overhead_s=c,
    )  # fmt: skip
    simulator.run([program(r) for r in range(4)])
    for log in logs:
        assert waited[log] == pytest.approx(alpha + (alpha - c), rel=1e-9)


def test_a_profiles_call_overhead_reaches_the_simulator_and_config(tmp_path):
    """``[network] call_overhead_s`` is read and recorded in config.json's cluster header; one
    that is not a number is refused, naming the key."""
    measured = _measured_cluster(tmp_path, "osu_allreduce", {"call_overhead_s": 1.5e-6})
    assert measured.call_overhead_s == 1.5e-6 and measured.header()["call_overhead_s"] == 1.5e-6
    with pytest.raises(ValueError, match="call_overhead_s"):
        _measured_cluster(tmp_path, "osu_allreduce", {"call_overhead_s": "x"})


def _measured_cluster(tmp_path, bench, network_keys):
    """The `build_cluster` of ``bench`` on a profile of measured costs (5 us, 1 GB/s, an eager
    limit of 4 KiB) with ``network_keys`` added to its ``[network]``."""
    import tomli_w

    oneway = _measured_cost(5e-6, 1e9)
    path = tmp_path / "measured.toml"
    network = {"topology": "star", "latency": "5us", "bandwidth": "1GB/s", "eager_bytes": 4096}
    network |= {"oneway": oneway, "sendrecv": oneway, **network_keys}
    path.write_text(tomli_w.dumps({"cluster": {"name": "measured"}, "network": network}))
    args = build_parser().parse_args([bench, "--profile", str(path)])
    return build_cluster(machine_options(args), load_profile(str(path)), None, "osu")


def test_simulated_osu_mbw_mr_shares_the_nic_and_its_table_fits_the_nic(tmp_path):
    """4 pairs across 2 hosts (8 ranks, 4 a host), 1 GB/s links, a 2 GB/s NIC a host: the pairs
    together move the NIC's 2 GB/s, not 4 x 1; that table, read back, fits [network]
    nic_bandwidth, and the fitted profile simulates it again."""
    from twinsgd.calibration.osu_tables import format_table

    shape = ["--ranks", "8", "--ranks-per-host", "4", "--nic-bandwidth", "2GB/s"]
    star = cluster("osu_mbw_mr", *shape)
    sizes = [2**k for k in range(14, 21)]
    rows = [
        (n, osu_value("osu_mbw_mr", simulate_benchmark("osu_mbw_mr", star, n), n, 1)) for n in sizes
    ]
    assert rows[-1][1] == pytest.approx(2e9 / 1e6, rel=0.02)
    path = tmp_path / "mbw_mr.txt"
    path.write_text("\n".join(format_table("osu_mbw_mr", "simulated", rows)) + "\n")
    latency = tmp_path / "latency.txt"
    points = [(n, (ALPHA + n / BETA) * 1e6) for n in [0, *sizes]]
    latency.write_text("\n".join(format_table("osu_latency", "simulated", points)) + "\n")
    said = []
    tables = [read_table(str(latency)), read_table(f"{path}:8x4")]
    document = fit_profile(tables, say=said.append)
    assert float(document["network"]["nic_bandwidth"].removesuffix("B/s")) == pytest.approx(
        2e9, rel=0.02
    )
    assert any(line.startswith("NIC: ") for line in said)
    one_host = fit_profile([tables[0], read_table(f"{path}:8x8")], say=said.append)
    assert "nic_bandwidth" not in one_host["network"]


@pytest.mark.parametrize(
    ("ranks", "bench"),
    [
        (2, "osu_latency"),
        (2, "osu_bw"),
        (4, "osu_mbw_mr"),
        (3, "osu_allreduce"),
        (3, "osu_bcast"),
        (3, "osu_reduce"),
    ],
)
def test_real_osu_under_mpiexec_prints_a_table_osu_readers_read(tmp_path, ranks, bench):
    """real.osu measures each benchmark under mpiexec and prints OSU's format: the table reads
    back (read_table) with the sizes asked for and every value > 0."""
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "real.osu", bench]
    cmd += ["--sizes", "4:4KiB", "--iterations", "0.002"]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "table.txt"
    out.write_text(done.stdout)
    table = read_table(f"{out}:{ranks}x{ranks}")  # one machine: every rank on one host
    assert table.bench == bench
    assert table.sizes.tolist() == [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert (table.seconds > 0).all()


def test_real_osu_failing_on_one_rank_ends_every_rank(tmp_path):
    """A rank that fails mid-table (here rank 1, at its first size) aborts the whole job: the
    other rank, waiting for it in an MPI call, does not hang, and the job exits non-zero. (The
    failing rank leaves a mark before it raises: its traceback, printed and flushed before the
    abort, can be lost in mpiexec's forwarding when the job is torn down, as it was once on a
    loaded machine.)"""
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    mark = tmp_path / "failed"
    script = (
        "import real.osu as o\n"
        "measure = o.measure\n"
        "def failing(comm, *args):\n"
        "    if comm.rank == 1:\n"
        f"        open({str(mark)!r}, 'w').close()\n"
        "        raise RuntimeError('rank 1 fails')\n"
        "    return measure(comm, *args)\n"
        "o.measure = failing\n"
        "o.main(['osu_latency', '--sizes', '4:8'])\n"
    )
    cmd = [mpiexec, "-n", "2", sys.executable, "-c", script]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert mark.exists()  # the failure was the one injected
    assert done.returncode != 0
    # its traceback, or none, or its first line alone (the rest lost with the job, seen once)
    first_line = "Traceback (most recent call last):"
    assert "rank 1 fails" in done.stderr or done.stderr.strip() in ("", first_line)


class _Recorder:
    """A communicator of ``rank`` that records the arrays it sends from and receives into."""

    def __init__(self, rank):
        from real.mpi import MPI

        self.rank, self.size, self.sent, self.received = rank, 2, [], []
        self.null = MPI.REQUEST_NULL

    def Send(self, buf, dest, tag):
        self.sent.append(buf)

    def Recv(self, buf, source, tag):
        self.received.append(buf)

    def Isend(self, buf, dest, tag):
        self.sent.append(buf)
        return self.null

    def Irecv(self, buf, source, tag):
        self.received.append(buf)
        return self.null

    def Barrier(self):
        """Alone: nothing to wait for."""


@pytest.mark.parametrize("rank", [0, 1])
def test_real_osu_and_the_calibrations_ping_pong_send_from_one_buffer_and_receive_into_another(
    rank,
):
    """As OSU's s_buf and r_buf: sending back the bytes just received moves lines dirty in the
    receiver's cache (twice as slow through shared memory), and a fresh np.zeros is one zero
    page read over and over. One buffer each for a whole window of osu_bw, as OSU's default."""
    from real.netbench import _round_trip, written
    from real.osu import WINDOW, bandwidth_MBps, latency_us

    comm = _Recorder(rank)
    latency_us(comm, 4096, iterations=3, warmup=1)
    bandwidth_MBps(comm, 4096, iterations=2, warmup=1, both_ways=True)
    buf = written(4096)
    _round_trip(comm, buf, np.zeros(1024, np.float32))
    sent = [b for b in comm.sent if b.nbytes == 4096]  # (osu_bw's 4-byte replies left out)
    received = [b for b in comm.received if b.nbytes == 4096]
    assert len(sent) == len(received) == 4 + 3 * WINDOW + 1
    for part in (slice(0, 4), slice(4, -1)):  # osu_latency's, then osu_bibw's
        assert all(b is sent[part][0] for b in sent[part])
        assert all(b is received[part][0] for b in received[part])
        assert not np.shares_memory(sent[part][0], received[part][0])
        assert np.all(sent[part][0] != 0)
    assert sent[-1] is buf and not np.shares_memory(buf, received[-1])
    assert buf.nbytes == 4096 and np.all(buf != 0)  # its pages written, not the zero page


def _forwarded(writes, costs, copies_bytes=0, local_copy=None, nbytes=100_000):
    """Rank 0 sends ``nbytes`` to 1, which forwards them to 2, all inside one MPI call each
    (`LibraryCall` with ``writes``): (when rank 2 has them, each rank's comm seconds)."""
    from sim.backend import LibraryCall, Simulator
    from sim.compute import ComputeModel
    from sim.network import make_network
    from tests.programs import ChargeLog

    def chain(rank):
        buf = np.ones(nbytes, np.uint8)
        if rank > 0:
            yield Recv(source=rank - 1, buf=buf)
        if rank < 2:
            yield Send(dest=rank + 1, payload=buf)

    def program(rank):
        yield LibraryCall(chain(rank), writes, copies_bytes)

    nodes = [SimpleNamespace(rank=r, size=3, reporter=0) for r in range(3)]
    logs = [ChargeLog() for _ in range(3)]
    network = make_network(None, "star", 3, 0.0, 1e12, costs)
    simulator = Simulator(
        nodes, logs, 0.0, 1e12, ComputeModel(seconds_per_sample=0.0), network=network,
        local_copy=local_copy,
    )  # fmt: skip
    simulator.run([program(r) for r in range(3)])
    return simulator.env.now, [log.seconds.get("comm", 0.0) for log in logs]


def test_bytes_an_mpi_call_has_just_written_move_at_the_written_cost_where_measured():
    """MPICH's collectives send what they copied, added or received, dirty in the sender's
    cache (1.3-2x a clean Sendrecv through shared memory here): inside a `LibraryCall` such
    messages take the network's ``oneway-written`` cost; "after_receive" (a broadcast) only
    once the rank has received; without a written cost, the clean one."""
    clean, written = PiecewiseCost.constant(2e-6, 1e9), PiecewiseCost.constant(3e-6, 0.5e9)
    costs = {"oneway": clean, "oneway-written": written}
    one, other = clean.seconds(100_000), written.seconds(100_000)  # 102 and 203 us
    assert _forwarded("never", costs)[0] == pytest.approx(2 * one, rel=1e-12)
    assert _forwarded("always", costs)[0] == pytest.approx(2 * other, rel=1e-12)
    assert _forwarded("after_receive", costs)[0] == pytest.approx(one + other, rel=1e-12)
    assert _forwarded("always", {"oneway": clean})[0] == pytest.approx(2 * one, rel=1e-12)


def test_a_call_not_in_place_copies_its_send_buffer_first_at_the_measured_copy():
    """OSU's separate buffers: MPICH's allreduce, reduce and allgather copy the caller's send
    buffer first (MPIR_Localcopy); `LibraryCall`'s ``copies_bytes`` costs the profile's
    ``[compute.copy]`` of that many bytes, charged as comm; no copy cost known, nothing."""
    clean = PiecewiseCost.constant(2e-6, 1e9)
    copy = PiecewiseCost.constant(0.1e-6, 16e9)
    plain, _ = _forwarded("never", {"oneway": clean})
    copied, comm = _forwarded("never", {"oneway": clean}, 65536, copy)
    assert copied - plain == pytest.approx(copy.seconds(65536), rel=1e-9)  # on the critical path
    sent = 100_000 / 1e9  # rank 0's Send: done once its bytes have left (no protocols here)
    assert comm[0] == pytest.approx(copy.seconds(65536) + sent, rel=1e-9)
    assert _forwarded("never", {"oneway": clean}, 65536)[0] == pytest.approx(plain, rel=1e-12)


def _one_machine_allreduce_s(tmp_path, compute, one_machine=True, nbytes=262144):
    """Seconds a call of ``sim.osu``'s allreduce of 2 ranks takes on a profile of measured
    costs (5 us, 1 GB/s) with ``compute`` (tables by name) as its ``[compute]``, one machine's
    or not."""
    import tomli_w

    oneway = _measured_cost(5e-6, 1e9)
    network = {"topology": "star", "latency": "5us", "bandwidth": "1GB/s", "eager_bytes": 4096}
    cluster_keys = {"name": "measured", "one_machine": one_machine, "cores": 2}
    document = {
        "cluster": cluster_keys | ({"hosts": ["vm", "vm"]} if one_machine else {}),
        "network": network | {"oneway": oneway, "sendrecv": oneway},
        "compute": compute,
    }
    path = tmp_path / "one-machine.toml"
    path.write_text(tomli_w.dumps(document))
    args = build_parser().parse_args(["osu_allreduce", "--profile", str(path)])
    built = build_cluster(machine_options(args), load_profile(str(path)), None, "osu")
    return float(np.mean(simulate_benchmark("osu_allreduce", built, nbytes)))


def test_mpis_first_copy_pays_for_the_half_the_other_rank_read_in_the_call_before(tmp_path):
    """One machine, MPICH's allreduce of 2 ranks at 256 KiB (Rabenseifner's): each rank sent
    the half of its receive buffer it holds in the last step of the call before, which the other
    read (CMA), so the next call's copy of the send buffer into it pays half its bytes at
    ``[compute.copy_read_by_peer]`` and half warm; without that table, or between hosts, all
    warm."""
    warm = _measured_cost(0.1e-6, 40e9)
    read = _measured_cost(0.3e-6, 2.5e9)
    n = 262144
    both = _one_machine_allreduce_s(tmp_path, {"copy": warm, "copy_read_by_peer": read})
    alone = _one_machine_allreduce_s(tmp_path, {"copy": warm})
    extra = 0.5 * (n / 2.5e9 - n / 40e9 + 0.2e-6)  # 49.2 us: on both ranks' path alike
    assert both - alone == pytest.approx(extra, rel=1e-6)
    between = _one_machine_allreduce_s(
        tmp_path, {"copy": warm, "copy_read_by_peer": read}, one_machine=False
    )
    assert between == pytest.approx(alone, rel=1e-12)


@pytest.mark.parametrize(("ranks", "adds"), [(2, 1), (4, 2)])
def test_a_profiles_add_call_from_python_is_taken_off_mpis_own_adds(tmp_path, ranks, adds):
    """``[compute.reduction] call_s`` through `build_cluster` to `sim.osu`: MPICH's allreduce
    of 8 KiB (Rabenseifner's: log2 p adds a rank) is that call an add faster; the broadcast,
    which adds nothing, not at all."""
    reduction = (
        "[compute.reduction]\nmin_bytes = [1024.0]\nmax_bytes = [16777216.0]\n"
        "latency_s = [1.4e-6]\nbandwidth_Bps = [2.5e10]\n"
    )
    seconds = {}
    for name, extra in (("table", ""), ("in C", "call_s = 1.1e-6\n")):
        path = tmp_path / f"{name}.toml"
        network = '[network]\nlatency = "2us"\nbandwidth = "1GB/s"\n\n'
        path.write_text(network + reduction + extra)
        args = build_parser().parse_args(
            ["osu_allreduce", "--profile", str(path), "--ranks", str(ranks)]
        )
        built = build_cluster(machine_options(args), load_profile(str(path)), None, "osu")
        seconds[name] = {
            bench: float(np.mean(simulate_benchmark(bench, built, 8192)))
            for bench in ("osu_allreduce", "osu_bcast")
        }
    assert seconds["table"]["osu_allreduce"] - seconds["in C"]["osu_allreduce"] == pytest.approx(
        adds * 1.1e-6, rel=1e-6
    )
    assert seconds["table"]["osu_bcast"] == seconds["in C"]["osu_bcast"]


def test_real_osus_ranks_in_no_pair_sleep_while_the_pair_measures(tmp_path):
    """osu_latency on 3 ranks (OSU's runs on exactly 2): rank 2 sleeps through the pair's
    ping-pong rather than polling in MPI beside it, so its CPU time is a small part of the
    table's wall time."""
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    code = (
        "import sys, time\n"
        "import real.osu as osu\n"
        "from real.mpi import MPI\n"
        "cpu, wall = time.process_time(), time.perf_counter()\n"
        "osu.main(['osu_latency', '--sizes', '4:64KiB', '--iterations', '0.3'])\n"
        "cpu, wall = time.process_time() - cpu, time.perf_counter() - wall\n"
        "print(f'rank {MPI.COMM_WORLD.rank} cpu {cpu} wall {wall}', file=sys.stderr)\n"
    )
    cmd = [mpiexec, "-n", "3", sys.executable, "-c", code]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    times = {  # (the ranks' lines may run into one another on the shared stderr)
        int(rank): (float(cpu), float(wall))
        for rank, cpu, wall in re.findall(
            r"rank (\d+) cpu ([0-9.e+-]+?) wall ([0-9.]+(?:e[+-]\d+)?)", done.stderr
        )
    }
    assert sorted(times) == [0, 1, 2], done.stderr
    cpu, wall = times[2]
    assert wall > 0.2 and cpu < 0.3 * wall, times  # asleep, not polling in MPI
    assert times[0][0] > 0.5 * times[0][1]  # the pair polls: busy all along


def _past_the_cores_profile(tmp_path, poll_wait_s):
    """`_emulated_profile`'s two emulated hosts, as calibrated with 2 ranks on each on one
    machine of 2 cores: the ranks past the cores see a message ``poll_wait_s`` later per rank
    past them (`sim.cores.Pollers`); a header comment as `real.calibrate` writes one."""
    import tomllib

    import tomli_w

    document = tomllib.loads(Path(_emulated_profile(tmp_path, 125e6, 125_000)).read_text())
    document["cluster"].update(one_machine=True, ranks_per_host=2, poll_wait_s=poll_wait_s)
    path = tmp_path / f"past-{poll_wait_s:g}.toml"
    header = "# Written by a test\n# of sim.calibrate --profile\n\n"
    path.write_text(header + tomli_w.dumps(document))
    return path


def _simulated_table(tmp_path, bench, profile_path, sizes):
    """``bench``'s table of 4 ranks, 2 a host, simulated on the profile, written as OSU
    prints it; its `read_table` spec ``FILE:4x2``."""
    from twinsgd.calibration.osu_tables import format_table

    args = build_parser().parse_args(
        [bench, "--profile", str(profile_path), "--ranks", "4", "--ranks-per-host", "2"]
    )
    cluster = build_cluster(machine_options(args), load_profile(str(profile_path)), None, "osu")
    iterations = loop_calls(cluster, bench)[0]
    rows = [
        (n, osu_value(bench, simulate_benchmark(bench, cluster, n, iterations), n, iterations))
        for n in sizes
    ]
    path = tmp_path / f"{bench}.txt"
    path.write_text("\n".join(format_table(bench, "simulated", rows)) + "\n")
    return f"{path}:4x2"


def test_poll_wait_is_fitted_from_the_allocations_small_collectives(tmp_path):
    """Tables of an allocation past its cores simulated with poll_wait_s = 8 us: fitted on a
    profile whose pair said 20 us, the allreduce's and the broadcast's sizes below 64 KiB
    give back 8 us within 2 %; what the larger sizes say is not used (their bytes, not the
    turns, make their time)."""
    from sim.calibrate import FIT_MIN_BYTES, fit_poll_wait

    truth, small = 8e-6, [4**k for k in range(1, 8)]
    assert max(small) < FIT_MIN_BYTES
    tables = [
        read_table(_simulated_table(tmp_path, b, _past_the_cores_profile(tmp_path, truth), small))
        for b in ("osu_allreduce", "osu_bcast")
    ]
    pair = load_profile(str(_past_the_cores_profile(tmp_path, 20e-6)))
    assert (
        build_cluster(
            machine_options(build_parser().parse_args(["osu_bcast", "--profile", pair.path])),
            pair,
            None,
            "osu",
        ).poll_wait_s
        == 0.0
    )  # 2 ranks: they fit the cores, so no turns (the tables' 4 do not)
    fitted, error = fit_poll_wait(pair, tables)
    assert fitted == pytest.approx(truth, rel=0.02)
    assert error < 0.01
    off, _ = fit_poll_wait(pair, tables[:1])  # the allreduce alone
    assert off == pytest.approx(truth, rel=0.02)


def test_sim_calibrate_profile_refits_poll_wait_and_keeps_the_rest(tmp_path):
    """``sim.calibrate --profile P --from-osu TABLE:4x2 --out Q``: Q is P with [cluster]
    poll_wait_s fitted, the pair's kept as poll_wait_pair_s, the fit's median error, and P's
    header; a profile without poll_wait_s or no collective table: one line, exit 2."""
    import tomllib

    import tomli_w

    truth = 8e-6
    table = _simulated_table(
        tmp_path, "osu_allreduce", _past_the_cores_profile(tmp_path, truth), [4, 64, 1024]
    )
    pair = _past_the_cores_profile(tmp_path, 20e-6)
    out = tmp_path / "refined.toml"

    def sim_calibrate(*argv):
        return subprocess.run(
            [sys.executable, "-m", "sim.calibrate", *argv],
            cwd=Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = sim_calibrate("--profile", str(pair), "--from-osu", table, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("poll_wait_s: 8 us a rank past the cores, fitted to ")
    refined, before = tomllib.loads(out.read_text()), tomllib.loads(pair.read_text())
    assert refined["cluster"].pop("poll_wait_s") == pytest.approx(truth, rel=0.02)
    assert refined["cluster"].pop("poll_wait_pair_s") == 20e-6
    assert 0 <= refined["cluster"].pop("poll_wait_error") < 0.01
    before["cluster"].pop("poll_wait_s")
    assert tomli_w.dumps(refined) == tomli_w.dumps(before)  # (as text: its NaN intervals)
    assert out.read_text().startswith("# Written by a test\n# of sim.calibrate --profile\n")
    again = sim_calibrate("--profile", str(out), "--from-osu", table, "--out", str(out))
    assert again.returncode == 0 and "the pair beside pollers gave 20 us" in again.stdout
    assert tomllib.loads(out.read_text())["cluster"]["poll_wait_pair_s"] == 20e-6
    latency = tmp_path / "latency.txt"
    latency.write_text("# OSU MPI Latency Test v7.0\n# Size  Latency (us)\n4 10.0\n8 10.5\n")
    for profile, spec, message in [
        (_past_the_cores_profile(tmp_path, 0.0), table, "no [cluster] poll_wait_s"),
        (pair, str(latency), "needs a collective table"),
    ]:
        done = sim_calibrate("--profile", str(profile), "--from-osu", spec, "--out", str(out))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr


# LogGP's gap: T(n) = 5 us + n / 1 GB/s one way (the latency table), a rank's g(n) = 0.5 us +
# n / 2 GB/s (a stream twice the latency table's slope), a NIC's h(n) = 0.1 us + n / 8 GB/s
T_S, G_S, H_S = (5e-6, 1e9), (0.5e-6, 2e9), (0.1e-6, 8e9)


def _seconds(cost, n):
    return cost[0] + n / cost[1]


def _gapped_cluster(tmp_path, bench, nic=True, eager=False, shape=()):
    """`_measured_cluster` of T_S with ``[network.gap]`` G_S and, where ``nic``, nic_gap H_S;
    no eager limit unless ``eager`` (as a profile fitted to OSU tables)."""
    import tomli_w

    oneway = _measured_cost(*T_S)
    path = tmp_path / "gapped.toml"
    network = {"topology": "star", "latency": "5us", "bandwidth": "1GB/s"}
    network |= {"oneway": oneway, "sendrecv": oneway, "gap": _measured_cost(*G_S)}
    network |= {"nic_gap": _measured_cost(*H_S)} if nic else {}
    network |= {"eager_bytes": 1 << 20} if eager else {}
    path.write_text(tomli_w.dumps({"cluster": {"name": "gapped"}, "network": network}))
    args = build_parser().parse_args([bench, "--profile", str(path), *shape])
    return build_cluster(machine_options(args), load_profile(str(path)), None, "osu")


@pytest.mark.parametrize("eager", [False, True])
@pytest.mark.parametrize("n", [8, 4096, 1 << 20])
def test_a_window_streams_at_the_gap_and_its_last_message_lands_one_way_later(tmp_path, n, eager):
    """osu_bw with a gap: the window's 64 messages leave the sender g(n) apart (eager ones too,
    in flight together: a rank sends one at a time), the last lands T(n) after it left, then
    the reply's T(4): 63 g + T(n) + T(4); not 64 n / beta + ..., the latency table's slope."""
    seconds = simulate_benchmark("osu_bw", _gapped_cluster(tmp_path, "osu_bw", eager=eager), n)
    expected = 63 * _seconds(G_S, n) + _seconds(T_S, n) + _seconds(T_S, 4)
    assert seconds[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("pairs", "n"), [(2, 64), (4, 64), (4, 1 << 20), (16, 1 << 20), (16, 64)])
def test_pairs_crossing_at_once_share_their_nic_at_its_own_gap(tmp_path, pairs, n):
    """osu_mbw_mr of ``pairs`` pairs, one host to the other: where pairs x h(n) < g(n) each pair
    streams as alone (the NIC keeps up: 64 B, 2 and 4 pairs) once its first message had its
    turn; else the NIC passes one message
    each h(n), never idle, and the last lands T(n) after it began: (64 pairs - 1) h + T(n) +
    T(4). Without nic_gap the NIC is one pair's: (64 pairs - 1) g + ..."""
    shape = ("--ranks", str(2 * pairs), "--ranks-per-host", str(pairs))
    g, h, t = _seconds(G_S, n), _seconds(H_S, n), _seconds(T_S, n) + _seconds(T_S, 4)
    seconds = simulate_benchmark(
        "osu_mbw_mr", _gapped_cluster(tmp_path, "osu_mbw_mr", shape=shape), n
    )
    if pairs * h < g:
        expected = [63 * g + t + i * h for i in range(pairs)]  # pair i first waits i turns
        assert seconds[:pairs] == pytest.approx(expected, rel=1e-9)
    else:
        assert max(seconds[:pairs]) == pytest.approx((64 * pairs - 1) * h + t, rel=1e-9)
    one_pair_nic = _gapped_cluster(tmp_path, "osu_mbw_mr", nic=False, shape=shape)
    seconds = simulate_benchmark("osu_mbw_mr", one_pair_nic, n)
    assert max(seconds[:pairs]) == pytest.approx((64 * pairs - 1) * g + t, rel=1e-9)


def test_the_gaps_fitted_to_bandwidth_tables_reproduce_them(tmp_path):
    """osu_bw and osu_mbw_mr of 16 pairs simulated on the gapped profile, written as OSU's
    tables beside its latency table: `fit_profile` finds g(n) and h(n) again (each within 3 %
    where it decides the table), and the fitted profile simulates osu_bw, and osu_mbw_mr at 2
    and 16 pairs, within 3 % at every size. Without osu_mbw_mr it fits neither, and says so."""
    import tomli_w

    from twinsgd.calibration.osu_tables import format_table

    sizes = [2**k for k in range(0, 23, 2)]
    truth = {}
    for bench, pairs in (("osu_bw", 1), ("osu_mbw_mr", 2), ("osu_mbw_mr", 16)):
        shape = ("--ranks", str(2 * pairs), "--ranks-per-host", str(pairs))
        star = _gapped_cluster(tmp_path, bench, shape=shape if pairs > 1 else ())
        truth[bench, pairs] = [
            (n, osu_value(bench, simulate_benchmark(bench, star, n), n, 1)) for n in sizes
        ]
    files = {}
    for (bench, pairs), rows in [*truth.items(), (("osu_latency", 1), None)]:
        rows = rows or [(n, _seconds(T_S, n) * 1e6) for n in sizes]
        files[bench, pairs] = tmp_path / f"{bench}_{pairs}.txt"
        files[bench, pairs].write_text("\n".join(format_table(bench, "simulated", rows)) + "\n")
    tables = [
        read_table(str(files["osu_latency", 1])),
        read_table(str(files["osu_bw", 1])),
        read_table(f"{files['osu_mbw_mr', 16]}:32x16"),
    ]
    said = []
    document = fit_profile(tables, say=said.append)
    gap = PiecewiseCost.from_dict(document["network"]["gap"])
    nic_gap = PiecewiseCost.from_dict(document["network"]["nic_gap"])
    for n in sizes:
        assert gap.seconds(n) == pytest.approx(_seconds(G_S, n), rel=0.03)
        if 16 * _seconds(H_S, n) > _seconds(G_S, n):  # the NIC decides that table there
            assert nic_gap.seconds(n) == pytest.approx(_seconds(H_S, n), rel=0.03)
    path = tmp_path / "fitted.toml"
    path.write_text(tomli_w.dumps(document))
    for (bench, pairs), rows in truth.items():
        shape = ["--ranks", str(2 * pairs), "--ranks-per-host", str(pairs)] if pairs > 1 else []
        args = build_parser().parse_args([bench, "--profile", str(path), *shape])
        fitted = build_cluster(machine_options(args), load_profile(str(path)), None, "osu")
        for n, value in rows:
            simulated = osu_value(bench, simulate_benchmark(bench, fitted, n), n, 1)
            assert simulated == pytest.approx(value, rel=0.03), (bench, pairs, n)
    assert any(line.startswith("nic_gap (the NIC's seconds a message, shared") for line in said)
    said.clear()
    alone = fit_profile(tables[:2], say=said.append)
    assert "gap" not in alone["network"] and "nic_gap" not in alone["network"]
    assert any(line.startswith("gap (a rank's seconds a message") for line in said)
