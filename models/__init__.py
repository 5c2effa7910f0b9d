"""numpy layers, the MLP and CNN, losses, optimizers, flat parameter buffers, large-model profiles.

Only numpy is imported here: no MPI, no simulator, no deep-learning framework.

Public API
----------
build_model(name, input_shape, n_classes, seed=0, dtype=np.float32) -> Model
    ``name`` is ``"mlp"`` or ``"cnn"``; ``input_shape`` is one sample's ``(H, W, C)``.
Model
    ``params`` (P,) contiguous buffer (the thing that is communicated; update it in place),
    ``views`` (name -> view into params), ``n_params``, ``loss_and_gradient(X, y, out=None)``,
    ``evaluate(X, y, batch_size=1000)``, ``log_probs(X)``, ``named_arrays()``, ``layer_specs``,
    ``flops_per_sample``. X is NHWC ``(n, H, W, C)`` float, y ``(n,)`` int.
make_optimizer(name, n_params, lr, dtype=np.float32, momentum=0.9, betas=(0.9, 0.999), eps=1e-8,
               schedule=None)
    ``"sgd" | "momentum" | "adam"``; ``opt.step(params, grad)`` updates in place; ``schedule``
    (e.g. ``cosine_schedule(total_steps)``) scales lr per step.
profile(name) -> Profile, PROFILES
    Parameter count and forward FLOPs of ``"resnet18"``, ``"vgg16"`` (CIFAR) and ``"resnet50"``
    (ImageNet), for ghost-mode simulation.

Parameter layout
----------------
One flat buffer per model; each layer's arrays lie back to back in layer order, W before b. The
gradient has the same layout. ``model.npz`` (``model.named_arrays()``) stores them by these names.

``mlp`` for input (H, W, C), d = H*W*C (784 for MNIST), k classes; 167,560 params for d=784, k=10::

    dense1.W (d, 200)    dense1.b (200,)       y = x @ W + b
    dense2.W (200, 50)   dense2.b (50,)
    dense3.W (50, k)     dense3.b (k,)

``cnn`` for input (H, W, C), H and W divisible by 4, k classes (28,938 params for 28x28x1 and
k=10; 34,538 for 32x32x3 and k=10; 218,948 for 32x32x3 and k=100)::

    conv1.W  (5, 5, C, 16)   conv1.b (16,)    5x5, stride 1, zero padding 2; 2x2 max pool; ReLU
    conv2.W  (5, 5, 16, 32)  conv2.b (32,)    5x5, stride 1, zero padding 2; 2x2 max pool; ReLU
    dense1.W (32*H/4*W/4, k) dense1.b (k,)    rows in (h, w, c) order of the NHWC activation

(ReLU after pooling is the same function, with the same gradient, as pooling after ReLU.)

Convolution weights are (kh, kw, cin, cout), so ``W.reshape(kh*kw*cin, cout)`` multiplies the im2col
matrix without a transpose; PyTorch's layout is (cout, cin, kh, kw), i.e.
``torch_W = W.transpose(3, 2, 0, 1)``. Dense weights are (din, dout); PyTorch's Linear stores
``W.T``. The cnn flattens NHWC activations, so the rows of ``dense1.W`` are in (h, w, c) order,
where a PyTorch model flattening NCHW would use (c, h, w).

Initialisation (from ``np.random.default_rng(seed)``, in layer order, W then b) is PyTorch's
default for Linear and Conv2d: W and b uniform in ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]``, with
``fan_in = din`` or ``kh*kw*cin``.
"""

from models.networks import MODELS, Model, build_model
from models.optimizers import OPTIMIZERS, cosine_schedule, make_optimizer
from models.profiles import PROFILES, Profile, profile

__all__ = [
    "MODELS",
    "OPTIMIZERS",
    "PROFILES",
    "Model",
    "Profile",
    "build_model",
    "cosine_schedule",
    "make_optimizer",
    "profile",
]
