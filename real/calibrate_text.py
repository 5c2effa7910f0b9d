"""What `real.calibrate` writes and prints: the profile (TOML, written atomically under a header
saying where and when it was measured), the summary of what was measured, and the numbers in
units the profile's readers parse (``1.234us``, ``5.67GB/s``: `sim.cluster_profile`).
"""

import datetime
import os
import socket
import tomllib

from twinsgd.calibration.jitter import Jitter


def step_times_text(times):
    """``1.14 ms per gradient of 100 (median of 396; 5-95 %: 1.02-1.41 ms)``."""
    what = "step" if times.own_code else "gradient"
    return (
        f"{times.median_s * 1e3:.4g} ms per {what} of {times.batch_size} (median of "
        f"{times.steps}; 5-95 %: {times.seconds_at(0.05) * 1e3:.4g}-"
        f"{times.seconds_at(0.95) * 1e3:.4g} ms)"
    )


def read_profile(path):
    """The TOML document at ``path``, or an empty one if there is no file yet."""
    if not path.exists():
        return {"cluster": {"name": f"step times of {path.stem}", "calibrated": True}}
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise ValueError(f"--out {path}: cannot read it as a profile ({err})") from None


HEADER = """\
# Written by python -m real.calibrate on {host} at {stamp}{took}; measured, not edited: run it
# again to refresh. [network.oneway] and [network.sendrecv]: piecewise alpha-beta models fitted to
# OSU-style timings of a ping-pong (one way) and a Sendrecv (each way at once), every measured
# point within max_rel_residual; [network.incast]: every other rank into rank 0, beside the star's
# prediction from the one-way model. [compute] seconds_per_step + b x seconds_per_sample: a
# training step of b samples in a hot loop, 1 BLAS thread, seconds_per_update of it Adam's;
# [compute.steps.MODEL]: compute seconds per step of the real program (quantiles at 0, 1, ...,
# 100 %), for sim.run --compute empirical.
"""


def write_profile(path, document, took_s=None):
    """Write the profile ``document`` to ``path`` atomically (a temporary file and a rename)."""
    import tomli_w

    stamp = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    took = f" in {took_s:.1f} s" if took_s is not None else ""
    text = (
        HEADER.format(host=socket.gethostname(), stamp=stamp, took=took)
        + "\n"
        + tomli_w.dumps(document)
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as err:
        raise ValueError(f"--out {path}: cannot write it ({err.strerror})") from None
    finally:
        tmp.unlink(missing_ok=True)


def summary_lines(
    oneway,
    sendrecv,
    in_situ,
    jitter,
    finish,
    incast,
    measured,
    rates,
    median_model,
    out,
    took_s,
    jitter_min_bytes,
):
    """The lines `real.calibrate` prints once the profile is written: each fitted model and
    measured figure, where in the profile it went, and where the profile is."""

    def segments(cost):
        return "; ".join(
            f"from {bytes_text(lo)}: alpha {seconds_text(a)}, beta {bandwidth_text(b)}"
            for lo, a, b in zip(cost.min_bytes, cost.latency_s, cost.bandwidth_Bps, strict=True)
        )

    lines = [
        f"network one way ({segment_count(oneway)}, worst point "
        f"{100 * oneway.max_rel_error:.1f} %): {segments(oneway)}",
        f"network Sendrecv ({segment_count(sendrecv)}, worst point "
        f"{100 * sendrecv.max_rel_error:.1f} %): {segments(sendrecv)}",
        f"send overhead o: {seconds_text(measured['overhead_s'])}; a step inside MPI's own "
        f"collectives {seconds_text(measured['call_overhead_s'])} under the hot loop's; a "
        f"Send of up to "
        f"{bytes_text(measured['eager_bytes'])} returns before its receiver is there "
        f"(eager)",
    ]
    if measured["eager_send_s"]:
        sizes, seconds = measured["eager_sizes"], measured["eager_send_s"]
        lines.append(
            f"an eager Send in situ holds its sender {seconds_text(seconds[0])} at "
            f"{bytes_text(sizes[0])}, {seconds_text(seconds[-1])} at {bytes_text(sizes[-1])} "
            f"([network.in_situ.send])"
        )
    if incast is not None:
        lines.append(
            f"incast {incast['ranks']} into 1: the star's prediction from the one-way "
            f"model is off by {100 * incast['max_rel_error']:.1f} % at worst"
        )
    models = ", ".join(
        f"{m} {1e3 * step:.3g} ms a step (the update {1e3 * update:.3g} ms) + "
        f"{1e6 * sample:.3g} us a sample ({rates[m] / 1e9:.2f} GFLOP/s)"
        for m, (step, sample, update) in measured["per_model"].items()
    )
    lines.append(
        f"compute (hot loop): {models}; flops_per_s {rates[median_model]:.3g} ({median_model})"
    )
    for name, times in measured["steps"].items():
        lines.append(f"compute (the real program): {name} {step_times_text(times)}")
    for pattern, name in (
        ("oneway", "one way"),
        ("sendrecv", "Sendrecv"),
        ("exchange", "exchange"),
    ):
        if pattern not in in_situ:  # (gossip's exchange: not measured on token buckets)
            continue
        probe = 2**18  # what programs send: a gradient's chunk
        spread = ""
        if jitter.get(pattern):
            by_size = Jitter.from_table(jitter[pattern])
            means = [by_size.mean_at(size) for size, _ in by_size.bands]
            dropped, reps = map(
                sum, zip(*measured["jitter_left_out"][pattern].values(), strict=True)
            )
            spread = (
                f"; jitter by size from {bytes_text(jitter_min_bytes)}: at {bytes_text(probe)} "
                f"mean {by_size.mean_at(probe):.2f}, p90 {by_size.quantiles_at(probe)[90]:.2f} x "
                f"the median (means {min(means):.2f}-{max(means):.2f} over sizes"
                + (
                    f"; {dropped} of {reps} repetitions a disturbance made long left out"
                    if dropped
                    else ""
                )
                + ")"
            )
        lines.append(
            f"network {name} in situ ({segment_count(in_situ[pattern])}): "
            f"{seconds_text(in_situ[pattern].seconds(probe))} for {bytes_text(probe)}, "
            f"hot {seconds_text((oneway if pattern == 'oneway' else sendrecv).seconds(probe))}"
            f"{' (a Sendrecv)' if pattern == 'exchange' else ''}"
            f"{spread}"
        )
    lines.append(
        f"reduction (gamma): {measured['gamma'] * 1e9:.3g} ns a byte combined "
        f"({1e-9 / measured['gamma']:.3g} GB/s)"
        if measured["gamma"] > 0
        else "reduction (gamma): not measurable here (no growth with size)"
    )
    for key, what in (("reduction", "reduction by size"), ("copy", "a copy by size")):
        if key in measured:  # warm, by size: what the simulator charges
            cost = measured[key]
            lines.append(
                f"{what} (warm, [compute.{key}]): "
                + ", ".join(
                    f"{cost.seconds(n) / n * 1e9:.3g} ns a byte at {bytes_text(n)}"
                    for n in (2**16, 2**19, 2**24)
                )
                + (
                    f"; {seconds_text(measured['reduction_call_s'])} of a call from Python, "
                    "which MPI's adds in C do not pay"
                    if key == "reduction" and "reduction_call_s" in measured
                    else ""
                )
            )
    probe = 2**20
    lines.append(
        f"allreduce in situ (2 ranks): {seconds_text(measured['allreduce_s'][-1])} for "
        f"{bytes_text(measured['allreduce_sizes'][-1])}; past its messages and add, "
        f"{seconds_text(finish.seconds(probe))} for {bytes_text(probe)} ([compute.finish])"
    )
    nbytes, write_s, read_s = measured["wire"]
    lines.append(
        f"compressed message, pattern in situ: written in {seconds_text(write_s[0])} and read "
        f"in {seconds_text(read_s[0])} at {bytes_text(nbytes[0])}, "
        f"{seconds_text(write_s[-1])} and {seconds_text(read_s[-1])} at "
        f"{bytes_text(nbytes[-1])}"
    )
    if measured["wire_in_program"] is not None:
        at, write, read, gather = measured["wire_in_program"]
        lines.append(
            f"compressed message in the real program: written in {seconds_text(write)}, "
            f"gathered in {seconds_text(gather)} and read in {seconds_text(read)} at "
            f"{bytes_text(at)} ([network.in_situ.wire])"
        )
    if measured["time_slice_s"]:
        lines.append(
            f"cores: {os.cpu_count()}, taken in turns of "
            f"{seconds_text(measured['time_slice_s'])} by more ranks than cores"
        )
    lines.append(
        f"memory: {measured['memory_copies']:.3g} copies at once at the pair's rate "
        f"([cluster] memory_copies)"
    )
    switches = ", ".join(
        f"{m} {seconds_text(x) if x is not None else 'not measured (0)'}"
        for m, x in measured["switch_s"].items()
    )
    lines.append(f"a step back on a core after another process: {switches} more (switch_s)")
    if measured.get("probe"):
        (plain, probed, taken), at = measured["probe"][-1], measured["in_situ_sizes"][-1]
        lines.append(
            f"a program's Recv (probe first) of {bytes_text(at)}: {seconds_text(probed)} one way "
            f"in situ against {seconds_text(plain)} with Recv alone, its Recv after the probe "
            f"{seconds_text(taken)} ([network.in_situ.probe])"
        )
    if measured.get("poll_wait") is not None:
        asleep_s, polling_s, past = measured["poll_wait"]
        lines.append(
            f"a message to a rank polling among {past} more than the cores: 8 B one way "
            f"{seconds_text(polling_s)} against {seconds_text(asleep_s)} with the others asleep "
            f"([cluster] poll_wait_s, unless fitted to the allocation's allreduce, above)"
        )
    if measured["stack"] is not None:
        stack = measured["stack"]
        lines.append(
            f"the kernel's CPU a byte over TCP: {1e9 * stack['send_s_per_byte']:.2f} ns sent, "
            f"{1e9 * stack['recv_s_per_byte']:.2f} ns received (busy "
            f"{1e9 * stack['busy_send_s_per_byte']:.2f} and "
            f"{1e9 * stack['busy_recv_s_per_byte']:.2f}; [network.stack])"
        )
    if measured.get("fan_out_gap_s") is not None:
        lines.append(
            f"a fan-out of {bytes_text(measured['fan_out_bytes'])} to two hosts: the second "
            f"receiver saw its message {seconds_text(measured['fan_out_gap_s'])} after the "
            f"first (the first flow's window ahead: [network.shaper] head_start_bytes)"
        )
    lines.append(
        f"own code right after a {bytes_text(measured['cold_own_bytes'])} message: "
        f"{seconds_text(measured['cold_own_s'])} more than warm (cold_own_s) in "
        f"{seconds_text(measured['cold_own_code_s'])} of code (cold_own_code_s)"
    )
    busy = "; ".join(
        f"{m} "
        + ", ".join(
            f"{k}: {b.mean_at(k):.2f}x ({row[0]:.2f}-{row[-1]:.2f})"
            for k, row in zip(b.processes[1:], b.factors[1:], strict=True)
        )
        for m, b in measured["busy"].items()
    )
    lines.append(f"a step with k processes computing at once, over one alone: {busy} (busy)")
    lines.append(f"wrote {out} in {took_s:.1f} s")
    return "\n".join(lines)


def segment_count(cost):
    """ "3 segments", or "3 segments and a bridge" where `fit_segments` joined two of them."""
    fitted, bridges = cost.fitted_segments, len(cost.latency_s) - cost.fitted_segments
    text = f"{fitted} segment{'s' * (fitted != 1)}"
    return text + {0: "", 1: " and a bridge"}.get(bridges, f" and {bridges} bridges")


def where_text(hosts, one_machine):
    machine = "one machine" if one_machine else "several machines"
    if len(set(hosts)) == 1:
        return f"all on {hosts[0]}: shared memory, not a network"
    return f"hosts {', '.join(dict.fromkeys(hosts))} on {machine}"


def mpi_library():
    """``MPICH 5.0.2``, ``Open MPI v4.1.5``: the library's name and version, one line."""
    from real.mpi import library_version

    first = library_version()
    return " ".join(first.replace("Version:", "").split()).split(",")[0]


def rounded(x, digits=4):
    """``x`` to ``digits`` significant digits."""
    return float(f"{x:.{digits - 1}e}")


def five_digits(x):
    return float(f"{float(x):.5g}")


def seconds_text(seconds):
    """A time with a unit ``parse_seconds`` reads, 4 significant digits: ``1.234us``."""
    value, unit = (seconds * 1e6, "us") if seconds < 1e-3 else (seconds * 1e3, "ms")
    return f"{value:.4g}{unit}"


def bandwidth_text(Bps):
    """A bandwidth with a unit ``parse_bandwidth_Bps`` reads, 4 significant digits: ``5.67GB/s``."""
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if Bps >= scale:
            return f"{Bps / scale:.4g}{prefix}B/s"
    return f"{Bps:.4g}B/s"


def bytes_text(nbytes):
    for scale, unit in ((2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g}{unit}"
    return f"{nbytes:.0f}B"
