#!/bin/bash
# Issue 24's check on a lent 16-core machine (`device`; ../shared/SIXTEEN-CORES.md): calibrated on
# 2 ranks, shared memory at 2, 4, 8, 16 ranks, then scripts/exchange_probe.py at 2, 4, 8 and 16
# ranks (scripts/core_speed_probe.py ran in its place on 2026-12-04). Everything it keeps goes to
# $OUT within device's limits (8 files): machine.txt, validate.log, validation.md,
# validation.csv, profile.toml, val.tgz (the run folders without weights), probe.txt and
# probe.json (a JSON line per job).
#
# Here, once (the wheels for that machine's Python 3.12, into an ignored folder):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
#     -d .whl mpich==5.0.2 mpi4py==4.1.2 simpy==4.1.2 tomli-w pyroute2==0.9.7 orjson
# Then `device` run: command `bash scripts/sixteen_cores.sh`, carry [".whl"], timeout_s 560
# (2026-12-04: validate took 244-260 s, a fresh machine ~30 s to start).
# VAL_S: validate's limit in seconds (default 420); the table is rebuilt from what finished.
set -u
: "${OUT:?run it through device (OUT is its output folder)}"
{ date; uname -r; nproc; grep -m1 "model name" /proc/cpuinfo; python3 --version; } > "$OUT/machine.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --prefix /tmp/pfx .whl/*.whl
python3 -m pip install -q --no-index --no-deps --no-build-isolation --prefix /tmp/pfx .
export PYTHONPATH=/tmp/pfx/lib/python3.12/site-packages PATH=/tmp/pfx/bin:$PATH \
       LD_LIBRARY_PATH=/tmp/pfx/lib OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 TWINSGD_OFFLINE=1 \
       PYTHONUNBUFFERED=1
start=$(date +%s)
timeout -s INT "${VAL_S:-420}" python3 -m twinsgd.analysis.validate --networks shm --hosts 2,4,8,16 \
  --configs allreduce-ring,allreduce-mpi,ps-sync,ps-async,gossip-ring --repeats 3 --iterations 100 \
  --out /tmp/val > "$OUT/validate.log" 2>&1
echo "validate rc=$? in $(( $(date +%s) - start )) s" >> "$OUT/machine.txt"
[ -f /tmp/val/validation.md ] || python3 -m twinsgd.analysis.validate --from /tmp/val >> "$OUT/validate.log" 2>&1
cp /tmp/val/validation.md /tmp/val/validation.csv /tmp/val/shm/profile.toml "$OUT/" 2>/dev/null
tar czf "$OUT/val.tgz" --exclude=model.npz -C /tmp val
for ranks in 2 4 8 16; do
  timeout 60 mpiexec -n "$ranks" python3 scripts/exchange_probe.py --out "$OUT/probe.json" \
    >> "$OUT/probe.txt" 2>&1
done
ls -la "$OUT"
