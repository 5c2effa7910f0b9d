"""Jitter: the measured spread of in-situ message times, drawn per message by the simulator."""

from types import SimpleNamespace

import numpy as np
import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.backend import Simulator
from sim.cluster_profile import load_profile
from sim.compute import ComputeModel
from sim.network import make_network
from tests.programs import ChargeLog, ping_pong
from twinsgd.calibration.costfit import PiecewiseCost
from twinsgd.calibration.jitter import FENCE_FACTOR, Jitter, factor_quantiles, undisturbed
from twinsgd.programs.ops import Exchange, SendRecv

ONEWAY = PiecewiseCost.constant(10e-6, 1e9)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=101, max_size=101), st.integers(0, 10**6))
def test_draws_stay_within_the_quantiles_and_average_to_their_mean(values, seed):
    jitter = Jitter(sorted(values), seed=seed)
    draws = np.array([jitter.draw() for _ in range(4000)])
    assert draws.min() >= jitter.quantiles[0] and draws.max() <= jitter.quantiles[-1]
    spread = jitter.quantiles[-1] - jitter.quantiles[0]
    assert abs(draws.mean() - jitter.mean) <= 0.05 * spread + 1e-12  # 4000 draws: about 4 sigma
    assert Jitter(sorted(values), seed=seed).draw() == Jitter(sorted(values), seed=seed).draw()


@pytest.mark.parametrize(
    ("quantiles", "match"),
    [([1.0] * 100, "101"), ([2.0] + [1.0] * 100, "non-decreasing"), ([0.0] * 101, "> 0")],
)
def test_bad_quantiles_are_refused(quantiles, match):
    with pytest.raises(ValueError, match=match):
        Jitter(quantiles)


def test_factors_are_each_size_over_its_median_from_the_threshold_up_kept_by_size():
    samples = {8: [1.0, 100.0, 5.0], 131072: [10.0, 10.0, 40.0], 65536: [1.0, 2.0, 3.0]}
    spread = factor_quantiles(samples, 65536)
    assert spread["sizes"] == [65536, 131072]  # the 8-byte size left out, in size order
    grid = np.linspace(0, 1, 101)
    assert spread["quantiles"][0] == pytest.approx(np.quantile([0.5, 1, 1.5], grid), rel=1e-3)
    assert spread["quantiles"][1] == pytest.approx(np.quantile([1, 1, 4], grid), rel=1e-3)
    assert factor_quantiles({8: [1.0, 2.0, 3.0]}, 65536) is None


def test_a_message_draws_from_the_spread_of_the_largest_measured_size_not_above_its_own():
    """A millisecond's hiccup on a 64 KiB message is a factor of 20; it must not become a
    factor of 20 on a 670 KB one measured without it (pooled, it did: 2026-12-02)."""
    hiccups, calm = [1.0] * 96 + [20.0] * 5, [0.9] * 50 + [1.1] * 51
    jitter = Jitter([hiccups, calm], seed=3, sizes=[65536, 524288])
    assert max(jitter.draw(670_000) for _ in range(2000)) <= 1.1
    assert max(jitter.draw_of_pair(524288) for _ in range(2000)) <= 1.1
    assert max(jitter.draw(65536) for _ in range(2000)) > 10  # its own size keeps its hiccups
    assert max(jitter.draw(1024) for _ in range(2000)) > 10  # below them all: the smallest's
    assert jitter.mean_at(1 << 20) == pytest.approx(1.0, abs=0.01)
    with pytest.raises(ValueError, match="increasing"):
        Jitter([calm, calm], sizes=[524288, 65536])
    with pytest.raises(ValueError, match="one quantile function per size"):
        Jitter([calm], sizes=[1, 2])


def test_one_spread_for_all_sizes_draws_as_before_whatever_the_size():
    """A profile written before the spread was kept by size: every message, whatever its size,
    draws the same factors in the same order (runs simulated on it do not change)."""
    values = np.linspace(0.5, 3.0, 101)
    one, other = Jitter(values, seed=9), Jitter.from_table(list(values), seed=9)
    assert [one.draw(8) for _ in range(50)] == [other.draw(1 << 24) for _ in range(50)]
    assert Jitter.from_table(one.to_dict()).bands == one.bands
    sized = Jitter([values, values * 2], sizes=[65536, 1 << 20])
    assert Jitter.from_table(sized.to_dict()).bands == sized.bands


def _ping_pong_s(jitter, nbytes=100_000):
    network = make_network(None, "star", 2, 5e-6, 1e9, {"oneway": ONEWAY}, jitter=jitter)
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    sim = Simulator(
        nodes, [ChargeLog() for _ in range(2)], 5e-6, 1e9, ComputeModel(0.0), network=network
    )
    sim.run([ping_pong(nbytes)(r) for r in range(2)])
    return sim.env.now


def test_each_measured_message_takes_its_draw():
    """A constant factor of 2 doubles both messages of a ping-pong; without jitter each takes
    the measured alpha + n / beta."""
    plain = _ping_pong_s(None)
    assert plain == pytest.approx(2 * ONEWAY.seconds(100_000), rel=1e-12)
    assert _ping_pong_s({"oneway": Jitter([2.0] * 101)}) == pytest.approx(2 * plain, rel=1e-12)
    spread = _ping_pong_s({"oneway": Jitter(np.linspace(1.0, 3.0, 101), seed=5)})
    assert plain < spread < 3 * plain


def test_a_profile_brings_its_jitter_to_the_in_situ_costs(tmp_path):
    from sim.cluster import build_cluster
    from sim.run import build_parser
    from twinsgd.run.config import parse_config

    document = {
        "cluster": {"name": "t", "calibrated": True, "cores": 2},
        "network": {
            "topology": "star",
            "oneway": ONEWAY.to_dict(),
            "in_situ": {
                "oneway": ONEWAY.to_dict(),
                "jitter": {"min_bytes": 65536, "oneway": [1.0] * 50 + [1.5] * 51},
            },
        },
    }
    path = tmp_path / "p.toml"
    path.write_text(tomli_w.dumps(document))
    profile = load_profile(str(path))
    options = build_parser().parse_known_args(["--nodes", "2", "--profile", str(path)])[0]
    cfg = parse_config(["--seed", "3"])
    cluster = build_cluster(options, profile, cfg, "mlp")
    assert set(cluster.jitter) == {"oneway"}
    assert cluster.jitter["oneway"].quantiles == tuple([1.0] * 50 + [1.5] * 51)
    assert build_cluster(options, profile, None, "mlp").jitter == {}  # sim.osu: hot costs
    by_size = {"sizes": [65536, 1 << 20], "quantiles": [[1.0] * 101, [2.0] * 101]}
    document["network"]["in_situ"]["jitter"]["oneway"] = by_size  # as real.calibrate writes
    path.write_text(tomli_w.dumps(document))
    cluster = build_cluster(options, load_profile(str(path)), cfg, "mlp")
    assert cluster.jitter["oneway"].to_dict() == by_size
    assert (cluster.jitter["oneway"].draw(4096), cluster.jitter["oneway"].draw(1 << 21)) == (1, 2)
    for bad, says in (([1.0] * 3, "101"), ({"sizes": [1], "quantiles": [[1.0] * 3]}, "101")):
        document["network"]["in_situ"]["jitter"]["oneway"] = bad
        path.write_text(tomli_w.dumps(document))
        with pytest.raises(ValueError, match=rf"\[network.in_situ.jitter\] oneway: .*{says}"):
            load_profile(str(path))


def test_the_network_draws_each_message_from_its_own_sizes_spread():
    """Factor 2 measured from 1 MiB, 1 below: a ping-pong of 100 kB takes the plain time, one of
    2 MB twice it."""
    sized = {"oneway": Jitter([[1.0] * 101, [2.0] * 101], sizes=[65536, 1 << 20])}
    assert _ping_pong_s(sized) == pytest.approx(_ping_pong_s(None), rel=1e-12)
    assert _ping_pong_s(sized, 2_000_000) == pytest.approx(
        2 * _ping_pong_s(None, 2_000_000), rel=1e-12
    )


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=101, max_size=101), st.integers(0, 10**6))
def test_the_slower_of_two_draws_of_a_pair_has_the_measured_spread(values, seed):
    """A Sendrecv's measured spread is of the slower of its two directions: the slower of two
    `draw_of_pair` draws has it (mean and median), and one draw alone is no slower."""
    jitter = Jitter(sorted(values), seed=seed)
    slower = np.array([max(jitter.draw_of_pair(), jitter.draw_of_pair()) for _ in range(4000)])
    alone = np.array([jitter.draw_of_pair() for _ in range(4000)])
    spread = jitter.quantiles[-1] - jitter.quantiles[0]
    assert abs(slower.mean() - jitter.mean) <= 0.05 * spread + 1e-12
    # the median of 4000 draws lies between the 45th and 55th percentiles (not near the 50th:
    # where the measured factors jump there, as from 1.0 to 2.0, it falls anywhere between)
    assert jitter.quantiles[45] - 1e-12 <= np.median(slower) <= jitter.quantiles[55] + 1e-12
    assert alone.mean() <= slower.mean() + 1e-12


def test_a_lockstep_sendrecv_pair_pays_the_measured_spread_once():
    """Two ranks exchange in lockstep 2000 times, each message's cost times factors spread
    evenly from 1 to 3 (a measured Sendrecv's spread): a step costs the measured mean, 2x the
    cost, not the slower of two whole draws (1 + 4/3)."""
    hold_s, steps = 1e-4, 2000
    cost = PiecewiseCost.constant(0.0, 100_000 / hold_s)
    network = make_network(
        None, "star", 2, 0.0, 1e12, {"sendrecv": cost},
        jitter={"sendrecv": Jitter(np.linspace(1.0, 3.0, 101), seed=7)},
    )  # fmt: skip
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    sim = Simulator(
        nodes, [ChargeLog() for _ in range(2)], 0.0, 1e12, ComputeModel(0.0), network=network
    )

    def program(rank):
        buf = np.empty(25_000, np.float32)
        for _ in range(steps):
            yield SendRecv(
                dest=1 - rank, payload=np.ones(25_000, np.float32), source=1 - rank, buf=buf
            )

    sim.run([program(r) for r in range(2)])
    assert sim.env.now / (steps * hold_s) == pytest.approx(2.0, rel=0.03)


def test_programs_pay_a_profiles_in_situ_eager_send_and_osu_the_hot_o(tmp_path):
    """``[network.in_situ.send]`` (as real.calibrate writes it, with its points) prices a
    program's eager Send by size; sim.osu's hot loops keep the profile's o; a table whose
    bandwidth is not positive names itself."""
    from real.calibrate import eager_send_cost
    from sim.cluster import build_cluster
    from sim.run import build_parser
    from twinsgd.run.config import parse_config

    sizes = [4096, 65536, 262144]
    send = eager_send_cost(sizes, [48e-6 + 0.5e-9 * n for n in sizes])  # 48 us + 2 GB/s
    document = {
        "cluster": {"name": "t", "calibrated": True, "cores": 2},
        "network": {
            "topology": "star",
            "overhead_s": 5e-6,
            "eager_bytes": 2**20,
            "oneway": ONEWAY.to_dict(),
            "in_situ": {"oneway": ONEWAY.to_dict(), "send": send},
        },
    }
    path = tmp_path / "p.toml"
    path.write_text(tomli_w.dumps(document))
    profile = load_profile(str(path))
    options = build_parser().parse_known_args(["--nodes", "2", "--profile", str(path)])[0]
    cluster = build_cluster(options, profile, parse_config([]), "mlp")
    fitted = PiecewiseCost.from_dict(send)
    assert cluster.send_cost.seconds(65536) == fitted.seconds(65536)
    assert fitted.seconds(65536) == pytest.approx(48e-6 + 0.5e-9 * 65536, rel=1e-9)
    assert cluster.header()["send_in_situ"] is True
    osu = build_cluster(options, profile, None, "mlp")  # sim.osu: the hot loop's o
    assert osu.send_cost is None and osu.send_overhead_s == 5e-6
    document["network"]["in_situ"]["send"]["bandwidth_Bps"] = [-1.0] * len(send["bandwidth_Bps"])
    path.write_text(tomli_w.dumps(document))
    with pytest.raises(ValueError, match="bandwidth"):
        load_profile(str(path))


def _exchange_s(costs, nbytes=100_000):
    """Seconds until 2 ranks have exchanged ``nbytes`` each way in gossip's `Exchange`."""
    network = make_network(None, "star", 2, 5e-6, 1e9, costs)
    nodes = [SimpleNamespace(rank=r, size=2, reporter=0) for r in range(2)]
    sim = Simulator(
        nodes, [ChargeLog() for _ in range(2)], 5e-6, 1e9, ComputeModel(0.0), network=network
    )

    def program(rank):
        buf = np.empty(nbytes // 4, np.float32)
        yield Exchange({1 - rank: np.ones(nbytes // 4, np.float32)}, {1 - rank: buf})

    sim.run([program(r) for r in range(2)])
    return sim.env.now


def test_gossips_exchange_is_priced_as_measured_for_it_else_as_a_sendrecv():
    """An Irecv, Isend and Waitall took 1.15-1.6x a Sendrecv in situ through shared memory
    (2026-12-02): where a calibration measured the exchange, its messages cost that; a profile
    without it prices them as the Sendrecv, as before."""
    sendrecv, exchange = PiecewiseCost.constant(10e-6, 1e9), PiecewiseCost.constant(20e-6, 5e8)
    assert _exchange_s({"sendrecv": sendrecv}) == pytest.approx(sendrecv.seconds(100_000))
    both = {"sendrecv": sendrecv, "exchange": exchange}
    assert _exchange_s(both) == pytest.approx(exchange.seconds(100_000), rel=1e-12)


def test_repetitions_a_disturbance_made_long_are_left_out_and_counted():
    """A calibration whose one-way spread had a fifth of its repetitions at 4-13x the median
    (shared memory, 2026-12-03) keeps its body alone; a spread without such a tail is kept
    whole."""
    body = list(np.linspace(0.9, 1.3, 40))
    disturbed = [*body, 4.6, 6.7, 9.0, 12.7, 13.3, 5.0, 7.5, 8.0, 11.0, 4.1]
    left_out = {}
    spread = factor_quantiles({65536: disturbed, 131072: body}, 65536, left_out)
    assert left_out == {65536: (10, 50), 131072: (0, 40)}
    kept = np.quantile(np.array(body) / np.median(disturbed), np.linspace(0, 1, 101))
    assert spread["quantiles"][0] == pytest.approx(kept, rel=1e-3)
    assert Jitter.from_table(spread).mean_at(65536) < 1.2  # 2.5 with the tail drawn from


@given(
    st.lists(st.floats(0.05, 50.0), min_size=3, max_size=200),
)
def test_what_is_left_out_is_never_under_the_fence_factor_nor_more_than_a_quarter(factors):
    factors = np.array(factors)
    kept = undisturbed(factors)
    assert np.all(np.isin(factors[factors <= FENCE_FACTOR], kept))  # a message's own spread
    assert len(kept) >= 0.75 * len(factors)  # the fence is above the upper quartile
