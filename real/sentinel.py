"""``python -m real.sentinel [--ready-fd FD] RUN_DIR SIZE RANK:PID ...``: says in the run folder
who died.

When one rank of an MPICH job dies (SIGKILL, the OOM killer, a segfault), the launcher kills the
others at once with SIGKILL: no rank gets to write anything, and the run folder would say
``running`` forever. The first rank on each machine therefore starts this small process in a
session of its own (the launcher's kill does not reach it), handing it the pids of that
machine's ranks. It waits on them (pidfds) and, when one ends without having said so in its
heartbeat (`real.watchdog`: ``done``, ``failed``, ...), waits for the dust to settle and marks
the run failed, naming the rank that died, the step it was in and what it was doing.

The rank named is one that died while not blocked in communication (the others were waiting on
it); a rank that killed itself on a fault schedule says so in its heartbeat and is named as
killed. It ends when every watched rank has.

The rank that starts it waits until it watches (it writes one byte to ``--ready-fd`` once its
pidfds are open), before the ranks' common start: a rank that dies in its first step is watched,
and the sentinel's own start (an interpreter and its imports, 50-60 ms of a core) is over before
the training's clock runs. Started alongside the first steps, it took a core from ranks that had
one each: on 2 cores, 2 ranks' exchanges of the first 55 ms took 1-5 ms each where they take
0.17 ms, 10-60 % of a 150-step run's communication (2026-11-27).
"""

import json
import os
import select
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from real.watchdog import BLOCKING, FINAL, read_heartbeats

SETTLE_S = 1.0  # after the first death, how long the launcher's cleanup may take
POLL_S = 1.0  # how often it looks whether the run ended while its processes live on
READY_S = 10.0  # how long the starting rank waits for it to watch


def start(folder, size, pids, ready_s=READY_S):
    """Start the sentinel for ``pids`` ({rank: pid}) of run ``folder``, detached: through a
    shell that starts it in the background and exits, so it belongs to no process of the job
    (nothing to reap, out of the launcher's reach). Returns True once it watches them, False
    if it did not say so within ``ready_s`` seconds (it may still come up)."""
    read_fd, write_fd = os.pipe()
    argv = [
        sys.executable,
        "-m",
        "real.sentinel",
        "--ready-fd",
        str(write_fd),
        str(folder),
        str(size),
        *(f"{rank}:{pid}" for rank, pid in sorted(pids.items())),
    ]
    try:
        subprocess.run(
            ["sh", "-c", '"$@" </dev/null >/dev/null 2>&1 &', "sh", *argv],
            check=True,
            start_new_session=True,
            cwd=os.getcwd(),
            env={**os.environ, "PYTHONPATH": _path()},
            pass_fds=(write_fd,),
        )
    finally:
        os.close(write_fd)  # the sentinel holds the only write end now: EOF if it dies first
    try:
        readable, _, _ = select.select([read_fd], [], [], ready_s)
        return bool(readable) and os.read(read_fd, 1) == b"1"
    finally:
        os.close(read_fd)


def _path():
    root = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)


def watch(folder, size, pids, ready=None):
    """Wait for every rank in ``pids``; mark the run failed if one died unannounced.
    ``ready``: called once every rank is watched (or known gone)."""
    fds = {}
    for rank, pid in pids.items():
        try:
            fds[os.pidfd_open(pid)] = rank
        except OSError:  # already gone
            fds[None] = rank
    if ready is not None:
        ready()
    died = []  # ranks that ended, in the order seen
    poller = select.poll()
    for fd in fds:
        if fd is not None:
            poller.register(fd, select.POLLIN)
    live = {fd for fd in fds if fd is not None}
    if None in fds:
        died.append(fds[None])
    deadline = None
    while live and (deadline is None or time.monotonic() < deadline):
        if deadline is None and _all_ended(folder, size, pids):
            return  # the run ended (a process running main() in-process lives on)
        timeout_ms = POLL_S * 1e3 if deadline is None else max(0, deadline - time.monotonic()) * 1e3
        for fd, _ in poller.poll(timeout_ms):
            poller.unregister(fd)
            live.discard(fd)
            os.close(fd)
            died.append(fds[fd])
        if deadline is None and _unannounced(folder, size, died):
            deadline = time.monotonic() + SETTLE_S
    unannounced = _unannounced(folder, size, died)
    if unannounced:
        _mark_failed(Path(folder), _cause(read_heartbeats(folder, size), unannounced, size))


def _all_ended(folder, size, pids):
    """True when every watched rank's heartbeat says it ended."""
    beats = read_heartbeats(folder, size)
    return all(beats[r] is not None and beats[r][1] in FINAL for r in pids)


def _unannounced(folder, size, died):
    """The ranks in ``died`` whose heartbeat does not say they ended (done, failed, ...)."""
    if not died:
        return []
    beats = read_heartbeats(folder, size)
    return [
        r for r in died if beats[r] is None or beats[r][1] not in FINAL or beats[r][1] == "killed"
    ]


def _cause(beats, died, size):
    """``rank 3 killed at step 40`` (a scheduled kill), else the first rank that died while not
    waiting on others, else the first that died."""
    for rank in died:
        if beats[rank] is not None and beats[rank][1] == "killed":
            return f"rank {rank} killed at step {beats[rank][0]}"
    culprit = next((r for r in died if beats[r] is None or beats[r][1] not in BLOCKING), died[0])
    beat = beats[culprit]
    where = "before its first step" if beat is None else f"at step {beat[0]} (in {beat[1]})"
    return f"rank {culprit} died {where}" + (
        "; the launcher stopped the others" if size > 1 else ""
    )


def _mark_failed(folder, why):
    """Set ``status`` of config.json to ``failed: why`` if it still says running, and
    summary.json's to config.json's (a rank that failed may have marked config.json alone)."""
    status = f"failed: {why}"
    for name in ("config.json", "summary.json"):
        path = folder / name
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(document, dict) or document.get("status") != "running":
            status = document.get("status", status) if isinstance(document, dict) else status
            continue
        document["status"] = status
        tmp = path.with_name(f".{name}.sentinel.tmp")
        tmp.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(tmp, path)


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    ready = None
    if args[0] == "--ready-fd":
        ready = partial(_say_ready, int(args[1]))
        args = args[2:]
    folder, size, *pairs = args
    pids = {int(rank): int(pid) for rank, pid in (p.split(":") for p in pairs)}
    watch(folder, int(size), pids, ready)
    return 0


def _say_ready(fd):
    """Tell the rank that started it (`start`) that it watches."""
    os.write(fd, b"1")
    os.close(fd)


if __name__ == "__main__":
    sys.exit(main())
