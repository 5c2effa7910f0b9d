"""One run configuration, and the command-line parser built from it.

`RunConfig` holds everything that decides what a run computes: dataset, model, optimizer, algorithm,
seeds, output. `real.train` (and later `sim.run`) build their argument parsers from its fields, so a
flag means the same thing in both front ends. A TOML file given with ``--config`` may set any field
(keys as the flags are spelt, ``batch-size`` or ``batch_size``); flags given on the command line
override it.

Examples
--------
>>> cfg = parse_config(["--dataset", "fashion-mnist", "--optimizer", "sgd", "--epochs", "3"])
>>> cfg.dataset, cfg.optimizer, cfg.lr, cfg.epochs
('fashion-mnist', 'sgd', 0.1, 3)
"""

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import twinsgd
from twinsgd.programs.compression import make_codec
from twinsgd.run.checkpoint import check_checkpointable
from twinsgd.run.faults import FaultSchedule, load_faults
from twinsgd.run.tomlfile import read_toml
from twinsgd.run.units import parse_seconds

ALGORITHMS = ("auto", "serial", "ps", "allreduce", "gossip")
MIXINGS = ("uniform", "metropolis")
GOSSIP_PAYLOADS = ("weights", "grad")
PS_MODES = ("sync", "async", "ssp")
ALLREDUCE_ALGOS = ("ring", "recursive-doubling", "rabenseifner", "reduce-bcast", "mpi")
DATASETS = ("mnist", "mnist-subset", "fashion-mnist", "cifar10", "cifar100", "synthetic")
MODELS = ("mlp", "cnn")
OPTIMIZERS = ("sgd", "momentum", "adam")
DEFAULT_LR = {"sgd": 0.1, "momentum": 0.01, "adam": 0.003}
LR_SCHEDULES = ("cosine", "constant")


def _flag(help, type=str, choices=None, group="training", metavar=None):
    """Field metadata: how the field appears on the command line."""
    return {"help": help, "type": type, "choices": choices, "group": group, "metavar": metavar}


MIN_DEFAULT_STEPS = 20  # a run left at its default length trains at least this many steps


@dataclass
class RunConfig:
    """The resolved configuration of one run (saved whole in the run folder's config.json)."""

    given = frozenset()  # the options the user set (flags or TOML); `parse_config` records them

    algorithm: str = field(
        default="auto",
        metadata=_flag(
            "training architecture; auto: serial on one process, data-parallel SGD (allreduce) on "
            "more",
            choices=ALGORITHMS,
            group="algorithm",
        ),
    )
    mode: str = field(
        default="sync",
        metadata=_flag(
            "parameter-server synchronisation (ps)", choices=PS_MODES, group="algorithm"
        ),
    )
    staleness: int = field(
        default=0,
        metadata=_flag(
            "ssp: how many steps a worker may run ahead of the slowest (0: synchronous)",
            type=int,
            metavar="S",
            group="algorithm",
        ),
    )
    servers: int = field(
        default=1,
        metadata=_flag(
            "ps: shard the weights over K server ranks (0..K-1), balanced by bytes",
            type=int,
            metavar="K",
            group="algorithm",
        ),
    )
    server_computes: bool = field(
        default=False,
        metadata=_flag(
            "the parameter server also trains on a shard (ps)", type=bool, group="algorithm"
        ),
    )
    replicas: int = field(
        default=1,
        metadata=_flag(
            "keep each server's shard on R servers (--mode sync): each applies every update and "
            "sends the weights, a worker takes the first to come; a killed server loses no update "
            "(simulated: MPICH ends a real job at a kill)",
            type=int,
            metavar="R",
            group="algorithm",
        ),
    )
    allreduce: str = field(
        default="ring",
        metadata=_flag(
            "allreduce implementation: ring, recursive-doubling, rabenseifner or reduce-bcast "
            "(ours: the simulator adds exactly as they do) or mpi (the MPI library's; simulated "
            "as what --mpi picks)",
            choices=ALLREDUCE_ALGOS,
            group="algorithm",
        ),
    )
    topology: str = field(
        default="ring",
        metadata=_flag(
            "gossip graph: ring, torus, hypercube, exponential, complete, star, random-regular:D, "
            "rotating, or an edge-list/GraphML FILE",
            metavar="NAME|FILE",
            group="algorithm",
        ),
    )
    mixing: str = field(
        default="uniform",
        metadata=_flag(
            "gossip mixing matrix: uniform neighbour averaging or Metropolis-Hastings weights",
            choices=MIXINGS,
            group="algorithm",
        ),
    )
    gossip: str = field(
        default="weights",
        metadata=_flag(
            "what gossip nodes mix: their weights (D-PSGD) or their gradients",
            choices=GOSSIP_PAYLOADS,
            group="algorithm",
        ),
    )
    local_steps: int = field(
        default=1,
        metadata=_flag(
            "Local-SGD: average the weights every P steps (1: average gradients every step)",
            type=int,
            metavar="P",
            group="algorithm",
        ),
    )
    compress: str = field(
        default="none",
        metadata=_flag(
            "compress what is sent: none, threshold:T, topk:F, randomk:F, qsgd:LEVELS, sign, fp16",
            metavar="CODEC",
            group="compression",
        ),
    )
    error_feedback: bool = field(
        default=False,
        metadata=_flag(
            "keep what compression dropped and add it to the next message",
            type=bool,
            group="compression",
        ),
    )
    consensus_step: float = field(
        default=1.0,
        metadata=_flag(
            "gossip --gossip weights with --compress: CHOCO's consensus step size gamma in (0, 1]",
            type=float,
            metavar="GAMMA",
            group="compression",
        ),
    )
    dataset: str = field(
        default="mnist",
        metadata=_flag(
            "training data; mnist falls back to a bundled subset when the full set is not found",
            choices=DATASETS,
        ),
    )
    data_dir: str | None = field(
        default=None,
        metadata=_flag(
            "folder holding <dataset>/ subfolders (default: $TWINSGD_DATA, cache, system folders)",
            metavar="DIR",
        ),
    )
    model: str = field(default="mlp", metadata=_flag("network", choices=MODELS))
    optimizer: str = field(default="adam", metadata=_flag("update rule", choices=OPTIMIZERS))
    lr: float | None = field(
        default=None,
        metadata=_flag(
            "peak learning rate (default: 0.003 adam, 0.1 sgd, 0.01 momentum)", type=float
        ),
    )
    lr_schedule: str = field(
        default="cosine",
        metadata=_flag(
            "cosine: anneal from --lr to 0 over the run's steps; constant: keep --lr",
            choices=LR_SCHEDULES,
        ),
    )
    momentum: float = field(
        default=0.9, metadata=_flag("momentum coefficient of --optimizer momentum", type=float)
    )
    batch_size: int = field(default=100, metadata=_flag("samples per node per step", type=int))
    epochs: int = field(default=2, metadata=_flag("passes over the training set", type=int))
    iterations: int | None = field(
        default=None,
        metadata=_flag("stop after this many steps instead (overrides --epochs)", type=int),
    )
    eval_every: int | None = field(
        default=None,
        metadata=_flag("evaluate every N steps (default: once per epoch)", type=int, metavar="N"),
    )
    target_accuracy: float | None = field(
        default=None,
        metadata=_flag("test accuracy in (0, 1] whose first crossing time is recorded", type=float),
    )
    seed: int = field(default=0, metadata=_flag("seed of initialisation and data order", type=int))
    out: str | None = field(
        default=None,
        metadata=_flag(
            "run folder (default: a new runs/<date>-<time>-<algorithm>-<dataset>)",
            metavar="RUN_DIR",
            group="output",
        ),
    )
    overwrite: bool = field(
        default=False,
        metadata=_flag(
            "let --out replace a run already in that folder (else refused)",
            type=bool,
            group="output",
        ),
    )
    faults: str | None = field(
        default=None,
        metadata=_flag(
            "fault schedule: TOML [[fault]] tables of rank, step (or time), kind = kill | "
            "exception | slow (factor, steps); see twinsgd/run/faults.py",
            metavar="FILE.toml",
            group="faults",
        ),
    )
    watchdog: str = field(
        default="auto",
        metadata=_flag(
            "real runs: stop the job (exit 3, naming the ranks that did not arrive) when one "
            "operation blocks longer than this: a time (30s), off, or auto: max(60s, 10x the "
            "longest step or evaluation so far)",
            metavar="TIME|auto|off",
            group="faults",
        ),
    )
    checkpoint_every: int | None = field(
        default=None,
        metadata=_flag(
            "write each rank's state (weights, optimizer, generator, residuals, data position) "
            "every K steps to RUN/checkpoint/, atomically",
            type=int,
            metavar="K",
            group="faults",
        ),
    )
    resume: str | None = field(
        default=None,
        metadata=_flag(
            "continue the run in RUN_DIR from the newest checkpoint every rank has (give the run's "
            "own options; it writes into RUN_DIR)",
            metavar="RUN_DIR",
            group="faults",
        ),
    )
    progress: bool = field(
        default=True, metadata=_flag("show a progress bar", type=bool, group="output")
    )
    measure_wait: bool = field(
        default=True,
        metadata=_flag(
            "separate waiting from communication by a timed barrier before each collective (off: "
            "pure-speed runs, all of it counts as communication)",
            type=bool,
            group="output",
        ),
    )

    def __post_init__(self):
        if self.lr is None:
            self.lr = DEFAULT_LR.get(self.optimizer)

    def validate(self):
        """Check the rules no single flag can check; raise ValueError naming the flag."""
        for name in (
            "algorithm",
            "mode",
            "allreduce",
            "mixing",
            "gossip",
            "dataset",
            "model",
            "optimizer",
            "lr_schedule",
        ):
            choices = _FIELDS[name].metadata["choices"]
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"--{_dash(name)} must be one of {', '.join(choices)}, "
                    f"got {getattr(self, name)!r}"
                )
        _positive(lr=self.lr, batch_size=self.batch_size, epochs=self.epochs)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--seed must be an integer >= 0, got {self.seed!r}")
        _positive(
            iterations=self.iterations, eval_every=self.eval_every, local_steps=self.local_steps
        )
        if self.local_steps > 1 and self.algorithm not in ("allreduce", "gossip", "auto"):
            raise ValueError(
                f"--local-steps {self.local_steps} needs --algorithm allreduce or "
                f"gossip, got {self.algorithm}"
            )
        if self.server_computes and (self.algorithm, self.mode) != ("ps", "sync"):
            raise ValueError(
                f"--server-computes needs --algorithm ps --mode sync, got "
                f"--algorithm {self.algorithm} --mode {self.mode}"
            )
        _positive(servers=self.servers)
        if self.servers > 1 and self.algorithm != "ps":
            raise ValueError(f"--servers {self.servers} needs --algorithm ps, got {self.algorithm}")
        _positive(replicas=self.replicas)
        if self.replicas > 1 and (self.algorithm, self.mode) != ("ps", "sync"):
            raise ValueError(
                f"--replicas {self.replicas} needs --algorithm ps --mode sync, got "
                f"--algorithm {self.algorithm}"
                + (f" --mode {self.mode}" if self.algorithm == "ps" else "")
            )
        if self.replicas > 1 and self.server_computes:
            raise ValueError(
                f"--server-computes needs a single server, got --replicas {self.replicas}"
            )
        if self.servers > 1 and self.server_computes:
            raise ValueError(
                f"--server-computes needs a single server, got --servers {self.servers}"
            )
        make_codec(self.compress)  # ValueError naming the rule of the spec
        if not 0.0 < self.consensus_step <= 1.0:
            raise ValueError(f"--consensus-step must be in (0, 1], got {self.consensus_step}")
        if self.compress != "none" and self.algorithm == "serial":
            raise ValueError("--compress needs a distributed --algorithm, got serial")
        self._refuse_ignored()
        if self.staleness < 0:
            raise ValueError(f"--staleness must be >= 0, got {self.staleness}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"--momentum must be in [0, 1), got {self.momentum}")
        if self.target_accuracy is not None and not 0.0 < self.target_accuracy <= 1.0:
            raise ValueError(f"--target-accuracy must be in (0, 1], got {self.target_accuracy}")
        self.fault_schedule()  # ValueError naming the file and the entry
        check_checkpointable(self)
        if self.resume is not None and not (Path(self.resume) / "config.json").is_file():
            raise ValueError(f"--resume {self.resume}: not a run folder (no config.json)")
        if (
            self.resume is not None
            and self.out is not None
            and Path(self.out).resolve() != Path(self.resume).resolve()
        ):
            raise ValueError(
                f"--resume {self.resume} writes into that folder, not --out {self.out}"
            )
        try:
            watchdog_s = self.watchdog_seconds()
        except ValueError as err:
            raise ValueError(f"--watchdog: {err}") from err
        if watchdog_s is not None and not watchdog_s > 0:
            raise ValueError(f"--watchdog must be > 0 (or off, auto), got {self.watchdog}")
        return self

    def fault_schedule(self):
        """The `run.faults.FaultSchedule` of ``--faults`` (empty without it)."""
        return load_faults(self.faults) if self.faults is not None else FaultSchedule()

    def watchdog_seconds(self):
        """``--watchdog`` in seconds: None for auto, ``math.inf`` for off."""
        if self.watchdog == "auto":
            return None
        if self.watchdog == "off":
            return math.inf
        return parse_seconds(self.watchdog)

    @property
    def run_name(self):
        """What a default run folder is named after: ``allreduce-mnist``."""
        return f"{self.algorithm}-{self.dataset}"

    def check_size(self, size):
        """Resolve ``--algorithm auto`` for ``size`` ranks (serial on one, allreduce on more)
        and check the rules that depend on the number of ranks; raise ValueError naming the
        flag."""
        if self.algorithm == "auto":
            self.algorithm = "serial" if size == 1 else "allreduce"
            self.validate()
        if self.algorithm == "serial" and size != 1:
            raise ValueError(
                f"--algorithm serial runs on one process, got {size} ranks "
                f"(use --algorithm allreduce or ps under mpirun)"
            )
        servers = self.servers * self.replicas
        if self.algorithm == "ps" and size < servers + 1:
            replicas = f" --replicas {self.replicas}" if self.replicas > 1 else ""
            raise ValueError(
                f"--algorithm ps --servers {self.servers}{replicas} needs at least "
                f"{servers + 1} ranks (servers and a worker), got {size}: run it "
                f"under mpirun -n N"
            )
        return self

    def _refuse_ignored(self):
        """Refuse an option the user set to other than its default that this run would ignore
        (``--mode ssp`` on allreduce): a silently ignored flag is a different experiment than
        the one asked for. ValueError naming the flag and what it needs."""
        ps, gossip = self.algorithm == "ps", self.algorithm == "gossip"
        rules = {
            "mode": (ps, "--algorithm ps"),
            "staleness": (ps and self.mode == "ssp", "--algorithm ps --mode ssp"),
            "allreduce": (self.algorithm in ("allreduce", "auto"), "--algorithm allreduce"),
            "topology": (gossip, "--algorithm gossip"),
            "mixing": (gossip, "--algorithm gossip"),
            "gossip": (gossip, "--algorithm gossip"),
            "consensus_step": (
                gossip and self.compress != "none",
                "--algorithm gossip with --compress",
            ),
            "error_feedback": (self.compress != "none", "--compress"),
        }
        for name, (applies, needs) in rules.items():
            value = getattr(self, name)
            if name in self.given and value != _FIELDS[name].default and not applies:
                shown = "" if isinstance(value, bool) else f" {value}"
                raise ValueError(
                    f"--{_dash(name)}{shown} needs {needs}, got --algorithm "
                    f"{self.algorithm}"
                    + (f" --mode {self.mode}" if ps else "")
                    + (
                        f" --compress {self.compress}"
                        if name in ("consensus_step", "error_feedback")
                        else ""
                    )
                )

    def fit_data(self, shard_samples):
        """Fit a run left at its defaults to the data it found; return the lines saying what was
        chosen (none when nothing changed).

        ``shard_samples``: training images of one node's shard. A default ``--batch-size`` that
        the shard cannot fill once shrinks to the largest power of two it can; a default length
        (2 epochs) of fewer than `MIN_DEFAULT_STEPS` steps becomes that many iterations. What the
        user set is kept (and refused later if it does not fit), so ``sim.run --nodes 210`` trains
        meaningfully on the bundled 10,000 images as written.
        """
        notes = []
        if "batch_size" not in self.given and 1 <= shard_samples < self.batch_size:
            default, self.batch_size = self.batch_size, 1 << (shard_samples.bit_length() - 1)
            notes.append(
                f"batch size {self.batch_size} per node: the default {default} does not "
                f"fit a node's shard of {shard_samples} images (set --batch-size)"
            )
        per_epoch = shard_samples // self.batch_size
        if (
            not {"epochs", "iterations"} & self.given
            and self.iterations is None
            and 0 < self.epochs * per_epoch < MIN_DEFAULT_STEPS
        ):
            self.iterations = MIN_DEFAULT_STEPS
            notes.append(
                f"{MIN_DEFAULT_STEPS} steps ({MIN_DEFAULT_STEPS / per_epoch:.3g} "
                f"epochs): {self.epochs:g} epochs are only {self.epochs * per_epoch} "
                f"steps of {per_epoch} per epoch here (set --epochs or --iterations)"
            )
        return notes

    def as_dict(self):
        """Plain dict of all fields (JSON-ready)."""
        return dataclasses.asdict(self)


_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}


def _dash(name):
    return name.replace("_", "-")


def _positive(**values):
    for name, value in values.items():
        if value is not None and not 0 < value < math.inf:
            raise ValueError(f"--{_dash(name)} must be a finite number > 0, got {value}")


def _with_default(text, default):
    """``--help`` text ending in the default, unless it already says what the default is."""
    if "default" in text or default is None:
        return text
    shown = (
        {True: "on", False: "off"}.get(default, default) if isinstance(default, bool) else default
    )
    return f"{text} (default: {shown})"


def add_config_arguments(
    parser, groups=("algorithm", "compression", "training", "faults", "output")
):
    """Add ``--config`` and one flag per RunConfig field of the given groups to ``parser``.

    Defaults are suppressed, so the parsed namespace holds only what the user typed; `parse_config`
    layers it over the TOML file and the dataclass defaults.
    """
    parser.add_argument(
        "--config",
        metavar="FILE.toml",
        default=argparse.SUPPRESS,
        help="TOML file with any of the options below; flags override it",
    )
    parser.add_argument("--version", action="version", version=f"twinsgd {twinsgd.__version__}")
    sections = {g: parser.add_argument_group(g) for g in groups}
    for f in dataclasses.fields(RunConfig):
        meta = f.metadata
        if meta["group"] not in sections:
            continue
        section = sections[meta["group"]]
        text = _with_default(meta["help"], f.default)
        if meta["type"] is bool:
            section.add_argument(
                f"--{_dash(f.name)}",
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=text,
            )
        else:
            section.add_argument(
                f"--{_dash(f.name)}",
                type=meta["type"],
                choices=meta["choices"],
                default=argparse.SUPPRESS,
                metavar=meta["metavar"],
                help=text,
            )
    return parser


def load_toml(path, own=()):
    """Read a TOML config file into (dict of RunConfig field values, dict of the front end's
    own options, by dest: those named in ``own``); ValueError naming the file on any problem."""
    raw = read_toml(path, f"--config {path}")
    values, others = {}, {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name in _FIELDS:
            values[name] = _typed(value, _FIELDS[name].metadata["type"], f"--config {path}: {key}")
        elif name in own:
            others[name] = value
        else:
            raise ValueError(f"--config {path}: unknown option {key!r}")
    return values, others


def option_actions(parser):
    """Every option of ``parser`` by dest (argparse Actions), ``--help`` aside."""
    # NOTE: argparse lists a parser's actions nowhere public; this is the one place that reads them
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}


def _own_actions(parser):
    """The front end's own options (not RunConfig fields), by dest: what its TOML may set too."""
    return {
        dest: a
        for dest, a in option_actions(parser).items()
        if dest not in _FIELDS and dest != "config"
    }


def _as_flags(others, actions, path):
    """The command-line flags that say what the TOML file says of the front end's own options,
    so argparse parses them (types, choices, errors naming the flag) as if typed."""
    flags = []
    for dest, value in others.items():
        action = actions[dest]
        flag = next(s for s in action.option_strings if s.startswith("--"))
        if action.nargs == 0:  # a switch: --x, or --no-x (BooleanOptionalAction)
            if not isinstance(value, bool):
                raise ValueError(
                    f"--config {path}: {flag[2:]} must be true or false, got {value!r}"
                )
            off = f"--no-{flag[2:]}"
            if value or off in action.option_strings:
                flags.append(flag if value else off)
        elif isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueError(
                f"--config {path}: {flag[2:]} must be a number or a string, got {value!r}"
            )
        else:
            flags.append(f"{flag}={value}")
    return flags


def _typed(value, kind, where):
    """Check a TOML value against the flag's type (ints pass as floats, nothing else converts)."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    raise ValueError(f"{where} must be {kind.__name__}, got {value!r}")


def parse_config(argv=None, parser=None):
    """Parse ``argv`` into a validated RunConfig; bad input ends in ``parser.error`` (exit 2)."""
    return parse_command(argv, parser)[0]


def parse_command(argv=None, parser=None):
    """Parse ``argv`` once into (validated RunConfig, namespace of the front end's own options,
    such as sim.run's ``--nodes``). ``--config FILE.toml`` may set any option of the command;
    flags override it. Bad input ends in ``parser.error`` (one line, exit 2)."""
    if parser is None:
        parser = add_config_arguments(argparse.ArgumentParser(prog="twinsgd"))
    args = parser.parse_args(argv)
    given = vars(args)
    try:
        values = {}
        if "config" in given:
            path, actions = given.pop("config"), _own_actions(parser)
            values, others = load_toml(path, own=actions)
            if others:  # the file's own options as flags before the command line's: these win
                argv = sys.argv[1:] if argv is None else list(argv)
                args = parser.parse_args([*_as_flags(others, actions, path), *argv])
                given = vars(args)
                given.pop("config")
        values.update((k, v) for k, v in given.items() if k in _FIELDS)
        cfg = RunConfig(**values)
        cfg.given = frozenset(values)  # before validate: it refuses what the run would ignore
        cfg.validate()
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    own = argparse.Namespace(**{k: v for k, v in given.items() if k not in _FIELDS})
    return cfg, own
