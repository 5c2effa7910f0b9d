"""Slurm on one machine: srun and sbatch start real.train on the MPI that srun's plugin speaks.

A module fixture writes a slurm.conf for this machine as one node, starts munged (with its own
socket), slurmctld and slurmd as root on ports of their own, and stops them all at the end.
Needs root and Debian's slurmctld, slurmd, slurm-client and munge (`.ci/run` installs them as
root); skips with the reason otherwise."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAEMONS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")
FLAGS = ["--dataset", "synthetic", "--iterations", "12", "--no-progress"]

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="starts Slurm's daemons: needs root"),
    pytest.mark.skipif(
        any(shutil.which(d) is None for d in DAEMONS),
        reason="needs Debian's slurmctld, slurmd, slurm-client and munge",
    ),
]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _first_job_id():
    """A first job id of this run's own. MPICH names a Slurm (PMI-2) job's shared-memory
    segment after its job and step ids; a job killed in an earlier run leaves its segment in
    /dev/shm, and the next job of that id read it: UCX failed in MPI_Init ("failed to unpack
    address, invalid bandwidth 0.00", 2026-12-04, each run of job 4 after one was killed)."""
    return int(time.time() * 10) % 60_000_000 + 1000


def _conf(folder, munge_socket):
    host = socket.gethostname().split(".")[0]
    return f"""ClusterName=twinsgd-test
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
FirstJobId={_first_job_id()}
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
NodeName={host} CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


def _stop(pid_file):
    with contextlib.suppress(OSError, ValueError, IndexError):  # not started, or gone
        os.kill(int(Path(pid_file).read_text().split()[0]), signal.SIGTERM)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment in which srun and sbatch reach a one-node Slurm running for this module."""
    folder = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "munge"):
        (folder / sub).mkdir(mode=0o700)
    munge_socket = folder / "munge" / "munge.socket.2"
    (folder / "slurm.conf").write_text(_conf(folder, munge_socket))
    env = {
        **os.environ,
        "SLURM_CONF": str(folder / "slurm.conf"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "OPENBLAS_NUM_THREADS": "1",
        "TWINSGD_OFFLINE": "1",
    }
    munged = [
        "munged",
        "--force",
        f"--socket={munge_socket}",
        f"--pid-file={folder / 'munge' / 'munged.pid'}",
        f"--seed-file={folder / 'munge' / 'seed'}",
        f"--log-file={folder / 'munge' / 'log'}",
    ]
    try:
        subprocess.run(munged, check=True, timeout=30, capture_output=True)
        subprocess.run(["slurmctld"], env=env, check=True, timeout=30, capture_output=True)
        subprocess.run(["slurmd"], env=env, check=True, timeout=30, capture_output=True)
        deadline = time.monotonic() + 30
        while "idle" not in _sinfo(env):
            if time.monotonic() > deadline:
                pytest.fail(f"the node never came up: {_sinfo(env)!r}")
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
        for daemon in ("slurmd", "slurmctld"):
            _stop(folder / f"{daemon}.pid")
        _stop(folder / "munge" / "munged.pid")
        time.sleep(1)


def _sinfo(env):
    done = subprocess.run(
        ["sinfo", "--noheader", "-o", "%T"], env=env, capture_output=True, text=True, timeout=30
    )
    return done.stdout


def _whole(out, job_id=None):
    """The run folder ``out`` of a finished run: its files, status done, the Slurm job's id."""
    config = json.loads((out / "config.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert config["status"] == "done"
    assert summary["iterations"] == 12
    assert (out / "model.npz").is_file() and (out / "steps.csv").is_file()
    assert config["slurm_job_id"] is not None
    if job_id is not None:
        assert config["slurm_job_id"] == job_id
    return config


def test_srun_with_pmi2_runs_real_train_on_the_mpich_wheel(slurm, tmp_path):
    out = tmp_path / "run"
    cmd = ["srun", "-n", "2", "--mpi=pmi2", sys.executable, "-m", "real.train", *FLAGS]
    done = subprocess.run(
        [*cmd, "--out", str(out)], cwd=ROOT, env=slurm, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    config = _whole(out)
    assert config["launcher"] == "Slurm's srun (PMI-2)"
    assert config["nodes"] == 2
    assert config["mpi"].startswith("MPICH")


def test_srun_without_an_mpi_plugin_is_refused_in_one_line(slurm, tmp_path):
    cmd = ["srun", "-n", "2", "--mpi=none", sys.executable, "-m", "real.train", *FLAGS]
    done = subprocess.run(
        [*cmd, "--out", str(tmp_path / "r")],
        cwd=ROOT,
        env=slurm,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    ours = [line for line in done.stderr.splitlines() if line.startswith("python -m real.train")]
    assert ours == [
        "python -m real.train: error: Slurm's srun, no MPI plugin started 2 ranks, but MPI sees "
        "a world of 1: the MPI library loaded does not speak to this launcher; launch with srun "
        "--mpi=pmi2 (or --mpi=pmix with Open MPI)"
    ]
    assert not (tmp_path / "r").exists()


def test_an_sbatch_of_the_example_job_script_finishes_with_its_run_folder_whole(slurm, tmp_path):
    script = ROOT / "scripts" / "train.sbatch"
    done = subprocess.run(
        ["sbatch", "--wait", "--parsable", f"--chdir={tmp_path}", str(script), *FLAGS],
        cwd=ROOT,
        env=slurm,
        capture_output=True,
        text=True,
        timeout=300,
    )
    job_id = done.stdout.strip().split(";")[0]
    log = tmp_path / f"twinsgd-{job_id}.out"
    assert done.returncode == 0, log.read_text() if log.exists() else done.stderr
    config = _whole(tmp_path / "runs" / f"slurm-{job_id}", job_id)
    assert config["launcher"] == "Slurm's srun (PMI-2)"
    assert "test accuracy" in log.read_text()


def test_validate_measures_its_table_under_srun(slurm, tmp_path):
    """``analysis.validate --launcher "srun --mpi=pmi2"``: the calibration and every real run
    start through srun (one host, shared memory), and the table is made."""
    out = tmp_path / "v"
    cmd = [sys.executable, "-m", "twinsgd.analysis.validate", "--quick", "--networks", "shm"]
    cmd += ["--configs", "allreduce-ring", "--iterations", "20", "--out", str(out)]
    done = subprocess.run(
        [*cmd, "--launcher", "srun --mpi=pmi2"],
        cwd=ROOT,
        env=slurm,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    cell = json.loads((out / "shm" / "allreduce-ring-2" / "row.json").read_text())
    calibration = out / "shm" / "calibrate.log"  # (once, under load: its srun step aborted)
    assert cell["status"] == "ok", calibration.exists() and calibration.read_text()[-4000:]
    reals = [c for c in cell["commands"] if "real.train" in c]
    assert reals and all(c[:4] == ["srun", "--mpi=pmi2", "-n", "2"] for c in reals)
    config = json.loads((out / "shm" / "allreduce-ring-2" / "real-1" / "config.json").read_text())
    assert config["launcher"] == "Slurm's srun (PMI-2)" and config["slurm_job_id"]
    assert "allreduce-ring" in done.stdout
