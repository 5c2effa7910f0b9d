"""The layers import one way (DESIGN: models/data/topologies <- programs <- run <- real/sim <-
analysis): every module's imports, read from its source, against the packages its layer may use."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# folder -> top-level names (or dotted prefixes) its modules must never import
FORBIDDEN = {
    "models": ("twinsgd", "sim", "real", "topologies", "mpi4py", "simpy"),
    "topologies": ("twinsgd", "sim", "real", "models", "mpi4py", "simpy"),
    "twinsgd/data": ("twinsgd.programs", "twinsgd.run", "sim", "real", "mpi4py", "simpy"),
    "twinsgd/programs": (
        "twinsgd.run",
        "twinsgd.calibration",
        "twinsgd.analysis",
        "sim",
        "real",
        "mpi4py",
        "simpy",
    ),
    "twinsgd/calibration": ("twinsgd.run", "twinsgd.analysis", "sim", "real", "mpi4py", "simpy"),
    "twinsgd/run": ("twinsgd.analysis", "sim", "real", "mpi4py", "simpy"),
    "sim": ("real", "twinsgd.analysis"),  # sim.sweep spreads points with mpi4py.futures
    "real": ("sim", "simpy", "twinsgd.analysis"),
}


def imported_names(path):
    """Every module name ``path`` imports, at any depth (function-level imports included)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def _violates(name, prefix):
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(folder):
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name in imported_names(path)
        if any(_violates(name, prefix) for prefix in FORBIDDEN[folder])
    ]
    assert not bad, "; ".join(bad)


def test_the_check_sees_a_forbidden_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from sim.network import make_network\n")
    assert any(_violates(name, "sim") for name in imported_names(module))
    assert not _violates("simpy", "sim")


LAYERS = (
    "twinsgd/programs",
    "twinsgd/run",
    "twinsgd/calibration",
    "twinsgd/data",
    "twinsgd/analysis",
    "twinsgd/cli",
    "sim",
    "real",
    "topologies",
    "models",
)


def _layer(module):
    """The layer (a key of `LAYERS`) a module name belongs to, or None (a library)."""
    parts = module.split(".")
    name = "/".join(parts[:2]) if parts[0] == "twinsgd" and len(parts) > 1 else parts[0]
    return name if name in LAYERS else None


def layer_imports():
    """layer -> the set of other layers its modules import, read from the code."""
    graph = {}
    for layer in LAYERS:
        paths = [ROOT / f"{layer}.py"] if (ROOT / f"{layer}.py").is_file() else []
        paths += sorted((ROOT / layer).rglob("*.py")) if (ROOT / layer).is_dir() else []
        graph[layer] = {
            _layer(name) for path in paths for name in imported_names(path) if _layer(name)
        } - {layer}
    return graph


def drawn_imports():
    """layer -> the layers docs/layout.md's table says it imports."""
    text = (ROOT / "docs" / "layout.md").read_text()
    table = text.split("| layer | imports, of this project's layers |")[1].split("\n\n")[0]
    graph = {}
    for row in table.strip().splitlines()[1:]:
        layer, imports = (cell.strip() for cell in row.strip("|").split("|"))
        graph[layer.strip("`")] = {name.strip("` ") for name in imports.split(",")} - {"(none)"}
    return graph


def test_docs_layout_draws_the_imports_the_code_has():
    assert drawn_imports() == layer_imports()
