"""``python -m real.train``: train for real and write a run folder.

Examples
--------
One process, no MPI needed::

    python -m real.train --algorithm serial --dataset mnist --data-dir ../shared/datasets --epochs 2

Set ``TWINSGD_OFFLINE=1`` to never try a download (the bundled MNIST subset is then the fallback).

Exit status: 0 done; 2 bad input (one line on stderr, no traceback); 1 a bug.
"""

import argparse
import datetime
import importlib.metadata
import os
import platform
import sys

import numpy as np

from algorithms import PROGRAMS
from algorithms.config import add_config_arguments, parse_config
from algorithms.node import Node
from algorithms.runfolder import RunFolder
from algorithms.runlog import RunLog
from data import DataError, load_dataset
from models import build_model, make_optimizer
from real.backend import run_program


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m real.train",
        description="Train a model for real (one process for --algorithm serial) and write a run "
                    "folder: config.json, metrics.csv, steps.csv, summary.json, model.npz.")
    return add_config_arguments(parser)


def main(argv=None):
    parser = build_parser()
    cfg = parse_config(argv, parser)
    try:
        dataset = load_dataset(cfg.dataset, cfg.data_dir,
                               allow_download=os.environ.get("TWINSGD_OFFLINE") != "1")
    except DataError as err:
        parser.error(str(err))
    if dataset.note:
        print(dataset.note, file=sys.stderr)
    if cfg.batch_size > dataset.n_train:
        parser.error(f"--batch-size {cfg.batch_size} is larger than the node's shard "
                     f"({dataset.n_train} samples of {dataset.name})")
    try:
        folder = RunFolder(cfg.out)
    except ValueError as err:
        parser.error(str(err))

    model = build_model(cfg.model, dataset.input_shape, dataset.n_classes, seed=cfg.seed)
    optimizer = make_optimizer(cfg.optimizer, model.n_params, lr=cfg.lr, momentum=cfg.momentum)
    node = Node(0, 1, cfg, dataset, model, optimizer)
    log = RunLog(folder, _header(cfg, dataset, model), cfg.target_accuracy, node.steps_per_epoch)
    bar = _progress(node.total_steps) if cfg.progress else None
    try:
        run_program(PROGRAMS[cfg.algorithm](node), node, log,
                    on_step=bar.update_step if bar else None)
    except BaseException as err:
        why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        log.finish(f"failed: {why}")
        raise
    finally:
        if bar:
            bar.close()
    log.finish("done", model.named_arrays())
    print(_report(log.summary(), folder.path))
    return 0


def _header(cfg, dataset, model):
    """The config.json document: resolved configuration and where the run happened."""
    return {
        "config": cfg.as_dict(),
        "dataset": dataset.name,
        "data_files": [str(f) for f in dataset.files],
        "nodes": 1,
        "params": model.n_params,
        "clock": "wall",
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": ["python", "-m", "real.train", *sys.argv[1:]],
        "host": platform.node(),
        "mpi": None,
        "versions": {"twinsgd": importlib.metadata.version("twinsgd"),
                     "python": platform.python_version(), "numpy": np.__version__},
    }


def _progress(total):
    from tqdm import tqdm

    bar = tqdm(total=total, unit="step", dynamic_ncols=True, mininterval=0.5, file=sys.stderr)
    bar.update_step = lambda step: bar.update(1)
    return bar


def _report(summary, path):
    acc = summary["final_test_accuracy"]
    return (f"{summary['dataset']}: {summary['iterations']} steps in {summary['time_s']:.1f} s "
            f"({summary['seconds_per_epoch']:.2f} s/epoch), test accuracy "
            f"{100 * acc:.2f}%, run folder {path}")


if __name__ == "__main__":
    sys.exit(main())
