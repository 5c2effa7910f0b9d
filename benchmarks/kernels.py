"""Training-step throughput of our numpy MLP and CNN against PyTorch's CPU build, one thread each.

    python benchmarks/kernels.py            (or: make bench)

One training step = forward, backward, Adam update, batch 100, float32. Both sides run on one thread
(OPENBLAS_NUM_THREADS=1 here, torch.set_num_threads(1) there) in the same process, interleaved in
rounds so that both see the same machine state; the first round is warm-up and discarded, and each
figure is the median over the remaining steps. The peer is the same network in PyTorch (conv, ReLU,
pool in the specified order), built with torch.nn and trained with torch.optim.Adam, in its default
NCHW layout and, for the CNN, also in channels_last (NHWC); "ratio" is ours / torch samples/s.

"% of peak" divides our achieved GEMM FLOP rate (the Dense and Conv2D multiply-adds of forward,
weight gradient and input gradient, 2 FLOPs each; Model.train_flops_per_sample) by the float32 GEMM
rate numpy reaches on this machine in the same run (a 1024^3 sgemm).

The environment may set OPENBLAS_CORETYPE=Haswell and OPENBLAS_L2_SIZE (older OpenBLAS builds need
them on this processor); they halve a current OpenBLAS's float32 GEMM, so the script re-executes
itself with both unset, for its own run only, and prints which BLAS kernel then runs. Torch is a
benchmark-only requirement (``pip install torch``); without it the torch columns are left empty.
"""

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

_CHILD = "TWINSGD_BENCH_CHILD"
_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _reexec_without_coretype():
    """Replace this process by itself with one BLAS thread and no OpenBLAS coretype override."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    }
    env.update(dict.fromkeys(_THREAD_VARS, "1"), **{_CHILD: "1"})
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


if os.environ.get(_CHILD) != "1":  # before numpy is imported: BLAS reads these at load time
    _reexec_without_coretype()

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_info  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import build_model, make_optimizer  # noqa: E402

BATCH = 100
# (model, input shape, torch memory format): PyTorch's default NCHW, and channels_last (NHWC, which
# oneDNN sometimes runs faster) so that the ratio is also given against the faster of the two.
CASES = [
    ("mlp", (28, 28, 1), "nchw"),
    ("cnn", (28, 28, 1), "nchw"),
    ("cnn", (28, 28, 1), "nhwc"),
    ("cnn", (32, 32, 3), "nchw"),
    ("cnn", (32, 32, 3), "nhwc"),
]


def gemm_peak_flops(n=1024, reps=15):
    """Median float32 FLOP/s of an n x n x n numpy matmul (2 n^3 FLOPs), warm-up discarded."""
    rng = np.random.default_rng(0)
    a, b = rng.random((n, n), np.float32), rng.random((n, n), np.float32)
    c = np.empty((n, n), np.float32)
    for _ in range(3):
        np.matmul(a, b, out=c)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / np.median(times)


def our_step(name, input_shape):
    """A closure running one of our training steps, and the model's training FLOPs per sample."""
    rng = np.random.default_rng(0)
    model = build_model(name, input_shape, 10, seed=0)
    opt = make_optimizer("adam", model.n_params, lr=1e-3)
    X = rng.random((BATCH, *input_shape), np.float32)
    y = rng.integers(0, 10, BATCH)
    grad = np.empty(model.n_params, np.float32)

    def step():
        model.loss_and_gradient(X, y, out=grad)
        opt.step(model.params, grad)

    return step, model


def torch_step(name, input_shape, memory_format="nchw"):
    """The same training step in PyTorch, or None if torch is not installed.

    ``memory_format="nhwc"`` runs the network and its input in ``torch.channels_last``.
    """
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    torch.manual_seed(0)
    nn = torch.nn
    H, W, C = input_shape
    if name == "mlp":
        net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(H * W * C, 200),
            nn.ReLU(),
            nn.Linear(200, 50),
            nn.ReLU(),
            nn.Linear(50, 10),
            nn.LogSoftmax(dim=1),
        )
    else:
        net = nn.Sequential(
            nn.Conv2d(C, 16, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * (H // 4) * (W // 4), 10),
            nn.LogSoftmax(dim=1),
        )
    X, y = torch.rand(BATCH, C, H, W), torch.randint(0, 10, (BATCH,))
    if memory_format == "nhwc":
        net, X = net.to(memory_format=torch.channels_last), X.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.NLLLoss()

    def step():
        opt.zero_grad()
        loss_fn(net(X), y).backward()
        opt.step()

    return step


def interleaved_medians(steps, rounds, per_round):
    """Median seconds per call of each step, run in alternating rounds; round 0 is warm-up."""
    times = [[] for _ in steps]
    for r in range(rounds + 1):
        for k, step in enumerate(steps):
            for _ in range(per_round):
                start = time.perf_counter()
                step()
                if r > 0:
                    times[k].append(time.perf_counter() - start)
    return [float(np.median(t)) for t in times]


def layer_breakdown(model, reps=10):
    """Median milliseconds per layer of forward and backward, and of the Adam update.

    Replays Model.loss_and_gradient layer by layer (it reads the model's private layer list).
    """
    rng = np.random.default_rng(1)
    X = rng.random((BATCH, *model.input_shape), np.float32)
    y = rng.integers(0, model.n_classes, BATCH)
    grad = np.empty(model.n_params, np.float32)
    opt = make_optimizer("adam", model.n_params, lr=1e-3)
    model.loss_and_gradient(X, y, out=grad)
    blocks, first, head = model._grad_views(grad), model._first_with_params, model.layers[-1][1]
    rows = {}

    @contextlib.contextmanager
    def clock(key):
        start = time.perf_counter()
        yield
        rows.setdefault(key, []).append(time.perf_counter() - start)

    for _ in range(reps):
        h = X
        for name, layer in model.layers[:-1]:
            with clock(f"{name} forward"):
                h = layer.forward(h)
        with clock("loss forward+backward"):
            head.forward(h, y)
            d = head.backward()
        for i in range(len(model.layers) - 2, first - 1, -1):
            name, layer = model.layers[i]
            with clock(f"{name} backward"):
                d = layer.backward(d, blocks[i], need_dx=i > first)
        with clock("adam update"):
            opt.step(model.params, grad)
    return {key: 1e3 * float(np.median(t)) for key, t in rows.items()}


def blas_description():
    """One line per BLAS library numpy loaded: API, kernel architecture, version, threads."""
    return [
        f"{i.get('internal_api')} {i.get('version')}, kernel {i.get('architecture')}, "
        f"{i.get('num_threads')} thread(s)"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds after a warm-up")
    parser.add_argument("--steps", type=int, default=4, help="steps per side per round")
    args = parser.parse_args(argv)

    with open("/proc/cpuinfo") as info:
        cpu = next(
            (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
            "unknown CPU",
        )
    print(f"CPU: {cpu}; numpy {np.__version__}")
    for line in blas_description():
        print(f"BLAS: {line}")
    print(
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
        f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}"
    )
    peak = gemm_peak_flops()
    print(f"float32 GEMM peak (numpy 1024^3 sgemm, 1 thread): {peak / 1e9:.1f} GFLOP/s")
    try:
        import torch

        print(
            f"torch {torch.__version__}, {torch.get_num_threads()} thread(s) after "
            "set_num_threads(1), mkldnn "
            f"{torch.backends.mkldnn.is_available()}"
        )
    except ImportError:
        print("torch is not installed: torch columns are empty (pip install torch)")

    header = (
        f"{'model (torch layout)':<24} {'ours samples/s':>14} {'torch samples/s':>15} "
        f"{'ratio':>6} {'ours GFLOP/s':>12} {'% of peak':>9} {'ms/step':>8}"
    )
    print(f"\nbatch {BATCH}, float32, Adam; medians of {args.rounds} rounds x {args.steps} steps")
    print(header)
    print("-" * len(header))
    models = {}
    for name, shape, memory_format in CASES:
        ours, model = our_step(name, shape)
        models[(name, shape)] = model
        peer = torch_step(name, shape, memory_format)
        steps = [ours] if peer is None else [ours, peer]
        t = interleaved_medians(steps, args.rounds, args.steps)
        flops = model.train_flops_per_sample * BATCH / t[0]
        label = f"{name} {'x'.join(map(str, shape))} ({memory_format.upper()})"
        torch_rate = f"{BATCH / t[1]:15,.0f}" if peer else f"{'-':>15}"
        ratio = f"{t[1] / t[0]:6.2f}" if peer else f"{'-':>6}"
        print(
            f"{label:<24} {BATCH / t[0]:14,.0f} {torch_rate} {ratio} {flops / 1e9:12.1f} "
            f"{100 * flops / peak:8.0f}% {1e3 * t[0]:8.2f}"
        )

    for key in (("cnn", (28, 28, 1)), ("cnn", (32, 32, 3))):
        rows = layer_breakdown(models[key])
        total = sum(rows.values())
        print(
            f"\nwhere our cnn {'x'.join(map(str, key[1]))} step goes (ms, median of 10; "
            f"total {total:.2f} ms)"
        )
        for row, ms in sorted(rows.items(), key=lambda kv: -kv[1]):
            if ms >= 0.05:
                print(f"  {row:<24} {ms:7.2f}  {100 * ms / total:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
