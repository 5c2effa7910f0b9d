"""The ranks run on their launcher's MPI (`real.mpi`): which launcher started a rank, the library
picked for it, Open MPI's mpirun with and without the mpich wheel beside it, and a world smaller
than the job refused in one line. Open MPI's tests need Debian's openmpi-bin (`.ci/run` installs
it as root) and skip with the reason where it is missing."""

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from real.mpi import Launcher, choose_library, launcher_of, libraries_for

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
OPENMPI = shutil.which("mpirun.openmpi")
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "TWINSGD_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
RUN = ["-m", "real.train", "--dataset", "synthetic", "--iterations", "12", "--no-progress"]
needs_openmpi = pytest.mark.skipif(
    OPENMPI is None, reason="no Open MPI (apt-get install openmpi-bin)"
)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        (
            {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "PMIX_RANK": "3"},
            Launcher("Open MPI's mpirun (PMIx)", "openmpi", 4, 3),
        ),
        (
            {"PMI_FD": "9", "PMI_RANK": "1", "PMI_SIZE": "2", "PMI_HOSTNAME": "vm"},
            Launcher("MPICH's mpiexec (Hydra, PMI)", "mpich", 2, 1),
        ),
        (
            {"SLURM_JOB_ID": "5", "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "PMI_FD": "7"},
            Launcher("Slurm's srun (PMI-2)", "mpich", 2, 1),
        ),
        (
            {"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_NTASKS": "8", "PMIX_RANK": "0"},
            Launcher("Slurm's srun (PMIx)", "openmpi", 8, 0),
        ),
        (
            {"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"},
            Launcher("Slurm's srun, no MPI plugin", None, 2, 0),
        ),
        ({"SLURM_JOB_ID": "5"}, None),  # an sbatch script's own shell: no task of a step
        ({"HOME": "/root"}, None),
    ],
)
def test_the_launcher_is_read_from_the_ranks_environment(environ, expected):
    assert launcher_of(environ) == expected


def test_the_sites_library_comes_first_then_the_venvs_then_the_systems(tmp_path):
    site_lib, venv = tmp_path / "site", tmp_path / "venv"
    for folder in (site_lib, venv / "lib"):
        folder.mkdir(parents=True)
        (folder / "libmpi.so.40").write_bytes(b"")
    (venv / "lib" / "libmpi.so.12").write_bytes(b"")
    environ = {"LD_LIBRARY_PATH": f"{tmp_path / 'none'}:{site_lib}"}
    assert libraries_for("openmpi", environ, venv).split(os.pathsep) == [
        str(site_lib / "libmpi.so.40"),
        str(venv / "lib" / "libmpi.so.40"),
        "libmpi.so.40",
    ]
    assert libraries_for("mpich", {}, venv).split(os.pathsep) == [
        str(venv / "lib" / "libmpi.so.12"),
        "libmpi.so.12",
    ]


def test_a_users_own_choice_of_library_is_left_alone():
    openmpi = {"OMPI_COMM_WORLD_SIZE": "2", "PMIX_RANK": "0"}
    chosen = dict(openmpi)
    assert choose_library(chosen).abi == "openmpi"
    assert chosen["MPI4PY_LIBMPI"].endswith("libmpi.so.40")
    for key in ("MPI4PY_LIBMPI", "MPI4PY_MPIABI"):
        own = {**openmpi, key: "mine"}
        choose_library(own)
        assert own == {**openmpi, key: "mine"}
    alone = {"HOME": "/root"}
    assert choose_library(alone) is None
    assert alone == {"HOME": "/root"}


def test_a_world_smaller_than_the_job_is_refused_in_one_line(tmp_path):
    """srun with no MPI plugin starts N processes that MPI_Init makes N singletons: each would
    train alone. Here one process with such a Slurm task's environment."""
    slurm = {"SLURM_JOB_ID": "5", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2"}
    cmd = [sys.executable, *RUN, "--out", str(tmp_path / "r")]
    done = subprocess.run(
        cmd, cwd=ROOT, env={**ENV, **slurm}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "python -m real.train: error: Slurm's srun, no MPI plugin started 2 ranks, but MPI sees "
        "a world of 1: the MPI library loaded does not speak to this launcher; launch with srun "
        "--mpi=pmi2 (or --mpi=pmix with Open MPI)"
    ]
    assert not (tmp_path / "r").exists()


def _train(launcher, python, out, *flags):
    cmd = [*launcher, python, *RUN, "--algorithm", "allreduce", "--out", str(out), *flags]
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    config = json.loads((out / "config.json").read_text())
    with np.load(out / "model.npz") as npz:
        return config, {name: npz[name] for name in npz.files}


def _openmpi(n=2):
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [OPENMPI, *root, "--oversubscribe", "-n", str(n)]


@pytest.fixture(scope="module")
def python_without_mpich(tmp_path_factory):
    """A Python environment with every package of this one but the mpich wheel: a venv whose
    site-packages point at this one's (a .pth file), with no MPI library under its lib/."""
    venv = tmp_path_factory.mktemp("nompich") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (target,) = (venv / "lib").glob("python*/site-packages")
    (target / "parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    assert not list((venv / "lib").glob("libmpi*"))
    return str(venv / "bin" / "python")


@needs_openmpi
@pytest.mark.parametrize("mpich_wheel", [True, False], ids=["with-mpich-wheel", "without"])
def test_open_mpis_mpirun_runs_allreduce_sgd_to_mpichs_weights(
    tmp_path, mpich_wheel, python_without_mpich
):
    """Our ring adds in the same order whatever carries its bytes: the same weights bit for
    bit under Open MPI as under MPICH, with the mpich wheel beside Open MPI or not."""
    python = sys.executable if mpich_wheel else python_without_mpich
    _, mpich = _train(
        [MPIEXEC, "-n", "2"], sys.executable, tmp_path / "mpich", "--allreduce", "ring"
    )
    config, openmpi = _train(_openmpi(), python, tmp_path / "ompi", "--allreduce", "ring")
    assert config["mpi"].startswith("Open MPI v4") and "\x00" not in config["mpi"]
    assert config["launcher"] == "Open MPI's mpirun (PMIx)"
    assert openmpi.keys() == mpich.keys()
    for name in mpich:
        np.testing.assert_array_equal(openmpi[name], mpich[name])


@needs_openmpi
def test_open_mpis_own_allreduce_reaches_mpichs_weights_to_rounding(tmp_path):
    """MPI's own Allreduce: each library adds the ranks' gradients in its own order (its
    algorithm for the size), so float32 sums may differ in the last bits and the weights drift
    apart by rounding only."""
    _, mpich = _train(
        [MPIEXEC, "-n", "2"], sys.executable, tmp_path / "mpich", "--allreduce", "mpi"
    )
    _, openmpi = _train(_openmpi(), sys.executable, tmp_path / "ompi", "--allreduce", "mpi")
    for name in mpich:
        np.testing.assert_allclose(openmpi[name], mpich[name], rtol=1e-4, atol=1e-6)


@needs_openmpi
def test_without_an_mpich_library_hydra_is_refused_in_one_line(tmp_path, python_without_mpich):
    """MPICH's mpiexec launching a Python that has no MPICH library to load: one line, exit 2."""
    import ctypes.util

    if ctypes.util.find_library("mpi") and "libmpi.so.12" in str(ctypes.util.find_library("mpi")):
        pytest.skip("this machine has a system MPICH library")
    cmd = [MPIEXEC, "-n", "2", python_without_mpich, *RUN, "--out", str(tmp_path / "r")]
    done = subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("python -m real.train: error: cannot load MPI library (libmpi.so.12): ")
    assert "MPICH's mpiexec (Hydra, PMI) needs an mpich-ABI library" in line


def test_a_plain_install_brings_no_mpi_and_the_mpich_extra_does():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split(";")[0].strip() for d in project["dependencies"]]
    assert "mpi4py" in names and "mpich" not in names
    assert [d.split(">")[0] for d in project["optional-dependencies"]["mpich"]] == ["mpich"]
    assert "mpich]" in (ROOT / "Makefile").read_text()  # make demo and make test install it
