#!/usr/bin/env bash
# `make demo`: the twin in one command. Measure a machine (network patterns, the real program's
# step times), train on it for real on 2 MPI ranks, simulate the same run on the measured model,
# and print the two side by side. As root, on an emulated cluster (2 hosts joined by 1 Gbit/s
# token-bucket links, python -m real.cluster); otherwise on this machine's shared memory.
set -euo pipefail
BIN=${BIN:-.venv/bin}
# --overwrite: the demo's own run folders are replaced each time it runs
TWIN=(--algorithm allreduce --iterations 300 --eval-every 100 --no-progress --overwrite)
unset TWINSGD_DATA  # the bundled MNIST subset: no data and no internet needed
if [ "$(id -u)" = 0 ] && "$BIN/python" -m real.cluster up --hosts 2 --bandwidth 1Gbit >/dev/null; then
    trap '"$BIN/python" -m real.cluster down >/dev/null' EXIT
    WHERE="an emulated cluster: 2 hosts, 1 Gbit/s token-bucket links, MPI over TCP"
    RUN=("$BIN/python" -m real.cluster run -n 2 --)
else
    WHERE="this machine's shared memory (an emulated cluster needs root)"
    RUN=("$BIN/mpiexec" -n 2)
fi
echo "make demo: the twin on $WHERE"
"${RUN[@]}" "$BIN/python" -m real.calibrate --quick --models mlp --out runs/this-machine.toml
"${RUN[@]}" "$BIN/python" -m real.train "${TWIN[@]}" --out runs/twin-real
"$BIN/python" -m sim.run --nodes 2 "${TWIN[@]}" --profile runs/this-machine.toml \
    --compute empirical --out runs/twin-sim
"$BIN/python" -m twinsgd.analysis.compare runs/twin-real runs/twin-sim
echo "make demo: measured on $WHERE"
