"""Building blocks of the emulated cluster: namespaces, veth pairs, a bridge, tbf, cgroups.

Theory of operation
-------------------
Host K is the network namespace ``tsgd-hK``. A veth pair joins it to the switch, the bridge
``tsgd-br`` in the root namespace: ``eth0`` inside the host, ``tsgd-hK`` on the bridge. A token
bucket (tbf) on ``eth0`` shapes what the host sends (its egress); one on ``tsgd-hK`` shapes what
the switch port sends to the host (its ingress). Both directions are shaped, as on a real NIC, so
N hosts pushing into one queue at that host's switch port, not in the senders.

Everything made carries the prefix ``tsgd`` (namespaces, links, cgroups, ``/etc/netns``
folders), so :func:`teardown` can remove it all, including what a crashed ``up`` left, and
touch nothing else. pyroute2 is imported inside the functions that use it, so ``import
real.cluster`` works without it.
"""

import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
import signal
import time
from pathlib import Path

PREFIX = "tsgd"
BRIDGE = f"{PREFIX}-br"
SUBNET = "10.213.0"  # a private /24 nothing else here uses; host K is .K+1
MAX_HOSTS = 253  # .1 to .253: .254 is left free, .255 is the broadcast address
NETNS_DIR = Path("/run/netns")
ETC_NETNS = Path("/etc/netns")  # ``ip netns exec`` bind-mounts /etc/netns/NAME/hosts on /etc/hosts
MTU = 1500
FRAME_OVERHEAD = 14  # Ethernet header bytes tbf counts on a veth (no preamble, no FCS)
# The tbf queue in front of the bucket holds this many seconds of traffic at the rate: deep
# enough that three TCP flows into one port (a 4 MiB incast) are not dropped, so contention shows
# as queueing rather than as retransmission timeouts. tc-tbf(8)'s "latency".
QUEUE_S = 0.1


class ClusterError(Exception):
    """Something the user or the machine must fix; its message is one line."""


def host_name(k):
    """The emulated host's name (also its hostname inside the cluster), ``h0``, ``h1``, ..."""
    return f"h{k}"


def netns_name(k):
    """Host K's network namespace; also the name of its veth end on the bridge (<= 15 chars)."""
    return f"{PREFIX}-h{k}"


def address(k):
    """Host K's IPv4 address: ``10.213.0.K+1``."""
    return f"{SUBNET}.{k + 1}"


def default_burst(rate_Bps):
    """The tbf bucket size in bytes for a rate in bytes per second: 1 ms of traffic, at least
    ten full frames.

    tc-tbf(8): the bucket must hold at least rate/HZ bytes (HZ = 1000: a millisecond of tokens),
    or tokens that arrive between two timer runs are lost and the rate falls short; Mininet's
    15,000 bytes is that figure at 100 Mbit/s, and too small at 1 Gbit/s, where the bucket would
    be emptied 8 times per millisecond. The floor of ten 1514-byte frames keeps slow links sending
    whole TCP bursts. A burst is sent at the veth's own speed, so a message of n bytes arrives up
    to burst/n early: 3 % of a 4 MiB message at 1 Gbit/s.

    >>> default_burst(125e6), default_burst(12.5e6), default_burst(125e3)
    (125000, 15140, 15140)
    """
    return max(round(rate_Bps / 1000), 10 * (MTU + FRAME_OVERHEAD))


# -- privileges and the machine ------------------------------------------------------------------


def check_machine():
    """Raise ClusterError (one line) unless this process may build namespaces: root or
    CAP_NET_ADMIN + CAP_SYS_ADMIN, ``ip`` on the PATH, pyroute2 importable."""
    if not _has_caps(12, 21):  # CAP_NET_ADMIN, CAP_SYS_ADMIN (mount, setns, unshare)
        raise ClusterError("needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run it with sudo")
    if shutil.which("ip") is None:
        raise ClusterError("needs the ip command (iproute2) for `ip netns exec`")
    try:
        import pyroute2  # noqa: F401
    except ImportError as err:
        raise ClusterError("needs pyroute2: pip install 'pyroute2>=0.9'") from err


def _has_caps(*bits):
    if os.geteuid() == 0:
        return True
    with open("/proc/self/status") as fh:
        eff = next((int(line.split()[1], 16) for line in fh if line.startswith("CapEff:")), 0)
    return all(eff >> bit & 1 for bit in bits)


def cores():
    """CPUs this process may run on (the upper bound of a host's CPU share)."""
    return len(os.sched_getaffinity(0))


# -- cgroups -------------------------------------------------------------------------------------

CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
# A host with a CPU share weighs this many ordinary processes, so that it gets its quota even
# when the machine is busy with other work (with weight 1 and two busy processes beside it, a
# 0.5-core host got 0.26 to 0.36 of a core on 2 cores). The quota still caps it.
WEIGHT = 10
CGROUP_V2 = Path("/sys/fs/cgroup")


def cgroup_root():
    """The folder under which a CPU-limited cgroup is made: cgroup v1's cpu hierarchy, or the v2
    unified one (with the cpu controller); ClusterError if neither is there."""
    if (CGROUP_V1 / "cpu.cfs_quota_us").exists():
        return CGROUP_V1
    controllers = CGROUP_V2 / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return CGROUP_V2
    raise ClusterError("--cpu needs the cgroup cpu controller (v1 at /sys/fs/cgroup/cpu, or v2)")


def make_cgroup(k, share):
    """Make host K's cgroup with a CPU quota of ``share`` cores (0.5: half a core); return its
    folder. v1: cfs_quota_us = share * cfs_period_us; v2: cpu.max = "quota period"."""
    root = cgroup_root()
    path = root / netns_name(k)
    path.mkdir()
    if root == CGROUP_V1:
        period_us = int((path / "cpu.cfs_period_us").read_text())
        (path / "cpu.cfs_quota_us").write_text(str(round(share * period_us)))
        (path / "cpu.shares").write_text(str(1024 * WEIGHT))
    else:
        subtree = root / "cgroup.subtree_control"
        if "cpu" not in subtree.read_text().split():
            subtree.write_text("+cpu")
        period_us = 100_000
        (path / "cpu.max").write_text(f"{round(share * period_us)} {period_us}")
        (path / "cpu.weight").write_text(str(100 * WEIGHT))
    return path


def _our_cgroups():
    for root in (CGROUP_V1, CGROUP_V2):
        if root.is_dir():
            yield from (p for p in root.glob(f"{PREFIX}-*") if p.is_dir())


# -- building ------------------------------------------------------------------------------------


def build(hosts):
    """Make the bridge, then each host of ``hosts`` (dicts with k, rate_Bps, burst_B, cpu).

    Not atomic: the caller tears down on failure. Raises ClusterError naming the step the kernel
    refused (no veth, bridge or tbf support; a name already taken).
    """
    from pyroute2 import IPRoute

    with _step(f"add the bridge {BRIDGE}"), IPRoute() as ipr:
        ipr.link("add", ifname=BRIDGE, kind="bridge")
        bridge = ipr.link_lookup(ifname=BRIDGE)[0]
        ipr.link("set", index=bridge, state="up")
    with IPRoute() as ipr:
        for host in hosts:
            _add_host(ipr, bridge, host)
    _write_etc_hosts(hosts)


def _add_host(ipr, bridge, host):
    from pyroute2 import IPRoute, netns

    k, name = host["k"], netns_name(host["k"])
    with _step(f"make the network namespace {name}"):
        netns.create(name)
    with _step(f"add the veth pair {name} - {name}:eth0"):
        ipr.link("add", ifname=name, kind="veth", peer={"ifname": "eth0", "net_ns_fd": name})
        port = ipr.link_lookup(ifname=name)[0]
        ipr.link("set", index=port, master=bridge, state="up")
    with _step(f"add tbf on {name}"):
        _add_tbf(ipr, port, host)  # the switch port toward the host: the host's ingress
    with _step(f"set up eth0 in {name}"), IPRoute(netns=name) as inside:
        eth0 = inside.link_lookup(ifname="eth0")[0]
        inside.addr("add", index=eth0, address=address(k), prefixlen=24)
        inside.link("set", index=eth0, state="up")
        inside.link("set", index=inside.link_lookup(ifname="lo")[0], state="up")
        _add_tbf(inside, eth0, host)  # the host's egress
    if host["cpu"] is not None:
        with _step(f"make the cgroup {name}"):
            make_cgroup(k, host["cpu"])


@contextlib.contextmanager
def _step(what):
    """Turn a refusal by the kernel during ``what`` into a one-line ClusterError."""
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        yield
    except (NetlinkError, OSError) as err:
        code = err.code if isinstance(err, NetlinkError) else err.errno
        hint = (
            " (missing kernel support: veth, bridge, sch_tbf?)"
            if code in (errno.EOPNOTSUPP, errno.ENOENT, errno.EINVAL)
            else ""
        )
        raise ClusterError(f"cannot {what}: {os.strerror(code or 0)}{hint}") from err


def _add_tbf(ipr, index, host):
    """A tbf root qdisc at host's rate. pyroute2's tbf (checked against ``tc -d qdisc show``)
    computes the same buffer ticks and limit as tc does; its rate field is 32-bit bytes/s, so
    rates stop at 34 Gbit/s (the caller refuses more)."""
    rate_Bps = round(host["rate_Bps"])
    ipr.tc(
        "add",
        "tbf",
        index=index,
        rate=rate_Bps,
        burst=host["burst_B"],
        limit=round(rate_Bps * QUEUE_S) + host["burst_B"],
    )


def _write_etc_hosts(hosts):
    """Name every host inside every host (``h1`` resolves to 10.213.0.2), as Mininet does."""
    lines = ["127.0.0.1\tlocalhost"] + [f"{address(h['k'])}\t{host_name(h['k'])}" for h in hosts]
    for host in hosts:
        folder = ETC_NETNS / netns_name(host["k"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "hosts").write_text("\n".join(lines) + "\n")


# -- what exists ---------------------------------------------------------------------------------


def our_namespaces():
    """Names of the network namespaces with our prefix, sorted by host number."""
    names = [p.name for p in NETNS_DIR.glob(f"{PREFIX}-*")] if NETNS_DIR.is_dir() else []
    return sorted(names, key=lambda n: (len(n), n))


def our_links():
    """Names of the root namespace's links with our prefix (bridge and switch-side veths)."""
    names = []
    for path in Path("/sys/class/net").iterdir():
        if path.name.startswith(f"{PREFIX}-"):
            names.append(path.name)
    return sorted(names)


def pids_inside(names=None):
    """PIDs of the processes in our namespaces (``names``, default all ours) or our cgroups."""
    inodes = set()
    for name in our_namespaces() if names is None else names:
        with contextlib.suppress(OSError):
            st = os.stat(NETNS_DIR / name)
            inodes.add((st.st_dev, st.st_ino))
    pids = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{entry.name}/ns/net")
                if (st.st_dev, st.st_ino) in inodes:
                    pids.add(int(entry.name))
    for cgroup in _our_cgroups():
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (cgroup / "cgroup.procs").read_text().split())
    pids.discard(os.getpid())
    return pids


def kill_inside(timeout_s=5.0):
    """SIGKILL every process in our namespaces and cgroups, again until none is left (a dying
    process may have forked); return how many were killed."""
    killed = set()
    deadline = time.monotonic() + timeout_s
    while (pids := pids_inside()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.05)
    return len(killed)


# -- tearing down --------------------------------------------------------------------------------


def teardown():
    """Remove everything with our prefix: processes inside, namespaces (their veths go with
    them), links left in the root namespace, cgroups, /etc/netns folders. Idempotent; returns the
    number of things removed."""
    from pyroute2 import IPRoute, netns
    from pyroute2.netlink.exceptions import NetlinkError

    removed = kill_inside()
    for name in our_namespaces():
        with contextlib.suppress(FileNotFoundError):
            netns.remove(name)
            removed += 1
    with IPRoute() as ipr:
        for name in our_links():
            for index in ipr.link_lookup(ifname=name):
                with contextlib.suppress(NetlinkError):  # gone already with its peer
                    ipr.link("del", index=index)
                    removed += 1
    removed += _remove_cgroups()
    if ETC_NETNS.is_dir():
        for folder in ETC_NETNS.glob(f"{PREFIX}-*"):
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def _remove_cgroups():
    removed = 0
    for path in _our_cgroups():
        for _ in range(50):  # rmdir fails with EBUSY while a killed task is still exiting
            try:
                path.rmdir()
                removed += 1
                break
            except OSError as err:
                if err.errno != errno.EBUSY:
                    raise
                time.sleep(0.02)
    return removed


# -- entering a host (used by the rank wrapper) ----------------------------------------------------

CLONE_NEWUTS = 0x04000000


def enter_host(hostname, cgroup):
    """Make this process the emulated host but for its network (``ip netns exec`` does that
    next): join its cgroup (a folder, or None), take a UTS namespace of its own and set the
    hostname, so MPI_Get_processor_name tells the ranks' hosts apart."""
    if cgroup is not None:
        Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.unshare(CLONE_NEWUTS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUTS) failed")
    import socket

    socket.sethostname(hostname)
