"""The run layer: a run's configuration (typed flags and TOML), units, run folders and their
writers, checkpoints, scheduled faults, and the set-up both front ends share (`prepare_nodes`).

It builds on the programs layer (`twinsgd.programs`) and is built on by ``real/`` and ``sim/``;
it imports neither.
"""

from twinsgd.run.nodes import prepare_nodes

__all__ = ["prepare_nodes"]
