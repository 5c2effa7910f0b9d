"""The fault-schedule format: what it reads, and one line naming the entry for what it refuses."""

import pytest

from twinsgd.run.faults import Fault, load_faults, parse_fail_spec, parse_faults


def test_a_schedule_file_reads_into_faults(tmp_path):
    path = tmp_path / "faults.toml"
    path.write_text(
        '[[fault]]\nrank = 3\nstep = 40\nkind = "kill"\n\n'
        '[[fault]]\nrank = 1\nstep = 10\nkind = "slow"\nfactor = 5\nsteps = 10\n'
    )
    schedule = load_faults(path)
    assert schedule.faults == (
        Fault(3, "kill", step=40),
        Fault(1, "slow", step=10, factor=5.0, steps=10),
    )
    assert schedule.failure_at(3, 40) == schedule.faults[0]
    assert schedule.failure_at(3, 39) is None
    assert [schedule.slowdown(1, s) for s in (9, 10, 19, 20)] == [1.0, 5.0, 5.0, 1.0]
    assert schedule.faults[0].describe() == "rank 3 killed at step 40"


def test_fail_spec_is_a_schedule_of_kills_at_times():
    assert parse_fail_spec("3@12.5s").faults == (Fault(3, "kill", time_s=12.5),)
    assert not parse_fail_spec(None)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"rank": 0, "step": 1, "kind": "explode"}], "kind must be one of kill, exception, slow"),
        ([{"rank": -1, "step": 1, "kind": "kill"}], "rank must be an integer >= 0, got -1"),
        ([{"rank": 0, "step": 0, "kind": "kill"}], "step must be an integer >= 1, got 0"),
        ([{"rank": 0, "kind": "kill"}], "give exactly one of step or time"),
        (
            [{"rank": 0, "step": 2, "time": "1s", "kind": "kill"}],
            "give exactly one of step or time",
        ),
        ([{"rank": 0, "step": 2, "kind": "slow", "factor": 0.5}], "factor must be a number >= 1"),
        ([{"rank": 0, "step": 2, "kind": "slow", "factor": float("inf")}], "factor must be"),
        ([{"rank": 0, "step": 2, "kind": "kill", "factor": 2.0}], 'belong to kind = "slow"'),
        ([{"rank": 0, "step": 2, "kind": "kill", "when": 2}], "unknown key 'when'"),
        ([{"rank": 0, "time": "5", "kind": "kill"}], "needs a unit"),
        (["kill"], "must be a table"),
    ],
)
def test_a_bad_entry_is_refused_naming_it(entries, message):
    with pytest.raises(ValueError, match=r"^--faults: fault 1: ") as err:
        parse_faults(entries)
    assert message in str(err.value)


def test_a_bad_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "f.toml"
    path.write_bytes(b"\xff\xfe[[")
    with pytest.raises(ValueError, match=f"^--faults {path}: not valid TOML"):
        load_faults(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_faults(tmp_path / "missing.toml")
    path.write_text("[fault]\nrank = 1\n")
    with pytest.raises(ValueError, match="array of tables"):
        load_faults(path)


def test_a_rank_outside_the_run_is_refused():
    schedule = parse_fail_spec("3@1s")
    schedule.check_size(4)
    with pytest.raises(ValueError, match=r"fault of rank 3, but the run has ranks 0\.\.2"):
        schedule.check_size(3)
