"""`real.sentinel`: the starting rank learns when it watches, and it names a rank that died.

The kills of whole MPI jobs are in tests/test_mpi.py and tests/test_train.py; here a plain child
process stands in for a rank, so the handshake itself is what is tested.
"""

import json
import subprocess
import sys
import time

from real import sentinel


def _run_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"status": "running"}))
    return tmp_path


def test_start_returns_once_it_watches_and_it_names_the_rank_that_died(tmp_path):
    folder = _run_folder(tmp_path)
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert sentinel.start(folder, 1, {0: rank.pid}) is True  # watching before it returns
        rank.kill()  # dies without a heartbeat saying so
        rank.wait()
        deadline = time.monotonic() + sentinel.SETTLE_S + 5
        while time.monotonic() < deadline:
            status = json.loads((folder / "config.json").read_text())["status"]
            if status != "running":
                break
            time.sleep(0.05)
        assert status == "failed: rank 0 died before its first step"
    finally:
        rank.kill()
        rank.wait()


def test_start_says_false_when_the_sentinel_dies_before_it_watches(tmp_path):
    folder = _run_folder(tmp_path)
    t0 = time.monotonic()
    # a pid that is not a number: the sentinel fails on its arguments and never says ready
    assert sentinel.start(folder, 1, {0: "not-a-pid"}) is False
    assert time.monotonic() - t0 < sentinel.READY_S  # told by the pipe's end, not the timeout
    assert json.loads((folder / "config.json").read_text())["status"] == "running"
