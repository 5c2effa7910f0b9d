"""`real.cluster hold` stops on SIGTERM as on Ctrl-C, and a child it forks does not: pyroute2
forks helpers while the cluster is built and stops them with SIGTERM. A helper that raised
KeyboardInterrupt instead ran the holder's ``finally`` (`down`) under the cluster being built and
read netlink replies meant for the holder, which then waited for ever. No root needed."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FORK_AND_STOP = """
import os, signal, time
from real.cluster import interrupt_in
holder = os.getpid()
signal.signal(signal.SIGTERM, interrupt_in(holder))
ready_r, ready_w = os.pipe()
try:
    child = os.fork()
    if child == 0:  # as pyroute2's helper: busy until its parent stops it
        os.write(ready_w, b"1")
        time.sleep(30)
        os._exit(0)
    os.read(ready_r, 1)
    os.kill(child, signal.SIGTERM)
    print("helper's exit status", os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]), flush=True)
    os.kill(holder, signal.SIGTERM)
    time.sleep(30)
except KeyboardInterrupt:
    print("holder interrupted", flush=True)
finally:
    print("finally in", "the holder" if os.getpid() == holder else "the helper", flush=True)
"""


def test_sigterm_interrupts_the_holder_and_ends_its_forked_helper_at_once():
    done = subprocess.run(
        [sys.executable, "-c", FORK_AND_STOP],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "helper's exit status 143",  # 128 + SIGTERM, and its `finally` never ran
        "holder interrupted",
        "finally in the holder",
    ]
