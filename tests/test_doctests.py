"""The examples in the docstrings run, for every module that has them (an example that has rotted
is a wrong document)."""

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = (
    "twinsgd.programs",
    "twinsgd.run",
    "twinsgd.calibration",
    "twinsgd.data",
    "models",
    "topologies",
    "sim",
    "twinsgd.analysis",
)
HAVE_EXAMPLES = {  # modules whose examples are their documentation: they must keep some
    "twinsgd.programs.compression",
    "twinsgd.run.units",
    "twinsgd.programs.collectives",
    "twinsgd.programs.ghost",
    "twinsgd.programs.block_collectives",
    "twinsgd.programs.broadcasts",
    "twinsgd.programs.reductions",
    "twinsgd.calibration.osu_tables",
    "twinsgd.calibration.costfit",
    "twinsgd.data.errors",
    "twinsgd.data.dataset",
    "twinsgd.data.synthetic",
    "twinsgd.data.sharding",
    "twinsgd.data.subset",
    "topologies.errors",
    "topologies.files",
    "topologies.families",
    "topologies.mixing",
    "topologies.schedule",
    "sim.network",
    "sim.sweep",
    "models.profiles",
}


MODULES = ("real.calibrate",)  # modules of packages not walked (real/ starts MPI on import)


def _modules():
    yield from MODULES
    for package in PACKAGES:
        root = importlib.import_module(package)
        yield package
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            yield info.name


@pytest.mark.parametrize("name", sorted(_modules()))
def test_the_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples fail in {name}"
    assert result.attempted > 0 or name not in HAVE_EXAMPLES, f"{name} lost its examples"
