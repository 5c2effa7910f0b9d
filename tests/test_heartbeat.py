"""The heartbeat records (`real.watchdog.Heartbeat`): each rank's record, written through a
shared map, read by other processes at once and kept when its writer dies."""

import subprocess
import sys

from real.watchdog import RECORD, Heartbeat, read_heartbeats


def test_records_of_ranks_on_different_pages_keep_each_other(tmp_path):
    """Ranks open the file in any order (a higher rank first makes it long); no rank's record
    clobbers another's, including ranks whose records lie past the first page."""
    ranks = [700, 0, 171, 3]  # 171 * 24 bytes is past the first 4 KiB page
    beats = {rank: Heartbeat(tmp_path, rank) for rank in ranks}
    for rank, heartbeat in beats.items():
        heartbeat.beat(rank + 1, "compute")
    beats[0].beat(9, "recv")
    found = read_heartbeats(tmp_path, 701)
    assert [(r, found[r][:2]) for r in sorted(ranks)] == [
        (0, (9, "recv")),
        (3, (4, "compute")),
        (171, (172, "compute")),
        (700, (701, "compute")),
    ]
    assert found[1] is None and found[500] is None  # never beat
    assert (tmp_path / ".heartbeat").stat().st_size == 701 * RECORD.size
    for heartbeat in beats.values():
        heartbeat.close()


def test_a_killed_writer_leaves_its_last_record(tmp_path):
    """The record is in the page cache, not the writer's memory: SIGKILL loses nothing."""
    code = (
        "import os, signal, sys; from real.watchdog import Heartbeat; "
        "h = Heartbeat(sys.argv[1], 2); h.beat(41, 'allreduce'); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], timeout=60, check=False)
    assert done.returncode == -9
    step, state, ago = read_heartbeats(tmp_path, 3)[2]
    assert (step, state) == (41, "allreduce") and 0 <= ago < 60


def test_a_file_system_that_maps_no_files_gets_a_pwrite_a_beat(tmp_path, monkeypatch):
    """Where the run folder cannot be mapped, each beat is written with pwrite instead."""

    def refuse(*args, **kwargs):
        raise OSError(19, "No such device")

    monkeypatch.setattr("real.watchdog.mmap.mmap", refuse)
    heartbeat = Heartbeat(tmp_path, 200)
    heartbeat.beat(7, "sendrecv")
    assert read_heartbeats(tmp_path, 201)[200][:2] == (7, "sendrecv")
    heartbeat.close()
