"""Profiles of large networks (parameters, forward FLOPs) for ghost mode, from their layer tables.

The simulator times ResNet-50-sized training without allocating it: what it needs is how many
parameters a gradient carries (``grad_nbytes = 4 * params`` in float32) and how much compute a
sample costs. Both are computed here from a table of the network's layers, generated from its
definition, and the parameter counts are tested to equal the published ones exactly.

Counting convention: ``macs_per_sample`` counts the multiply-adds of the convolutions and fully
connected layers of one forward pass; ``flops_per_sample = 2 * macs_per_sample`` (a multiply-add is
two FLOPs). Batch normalisation, ReLU, pooling and residual additions are not counted (under 1% of
the total for these networks). Published "FLOPs" of these networks are usually multiply-adds
(torchvision's "GFLOPS" column, thop's and ptflops' "MACs").

Sources (published figures, cited in each profile's ``source``):

- ResNet-50: torchvision ``resnet50`` (ResNet v1.5: stride in the 3x3 convolution), ImageNet
  224x224, 1000 classes; torchvision's model documentation gives num_params 25,557,032 and
  4.09 GFLOPS (multiply-adds). He et al. 2016 (arXiv:1512.03385), Table 1, give 3.8e9 FLOPs for
  the original v1 (multiply-adds, stride in the first 1x1 convolution).
- ResNet-18 (CIFAR): kuangliu/pytorch-cifar ``models/resnet.py``, ``ResNet18()`` with
  BasicBlock: 3x3 stem, stride 1, no max pooling, BatchNorm, 4x4 average pooling, 512 -> 10;
  11,173,962 parameters and 0.56 G multiply-adds (as torchsummary and thop report for it).
- VGG-16 (CIFAR): kuangliu/pytorch-cifar ``models/vgg.py``, ``VGG('VGG16')``: the 13 convolutions
  of Simonyan & Zisserman's configuration D (arXiv:1409.1556), each 3x3 with bias, BatchNorm and
  ReLU, and one 512 -> 10 classifier; 14,728,266 parameters and 0.31 G multiply-adds.
- cnn-cifar: not a published network but this project's own numpy ``cnn`` on 32x32x3 input, 10
  classes (`models.networks`), so that a simulation can time it at hundreds of ranks without
  computing its gradients: 34,538 parameters, and the same forward multiply-adds as the real
  model's ``flops_per_sample`` counts (its convolutions and dense layer), so a preset that charges
  compute from FLOPs charges the ghost exactly what it charges the real ``cnn``.

Examples
--------
>>> p = profile("resnet50")
>>> p.params, p.macs_per_sample, p.grad_nbytes
(25557032, 4089184256, 102228128)
"""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LayerRow:
    """One row of a network's layer table.

    Attributes
    ----------
    name : str
    kind : {"conv", "bn", "linear"}
    params : int
        Trainable parameters (BatchNorm: weight and bias; running statistics are not parameters).
    macs : int
        Forward multiply-adds per sample (0 for BatchNorm).
    output_shape : (H, W, C) or (d,) tuple of int
    """

    name: str
    kind: str
    params: int
    macs: int
    output_shape: tuple


@dataclass(frozen=True)
class Profile:
    """Size and compute of one network, for ghost-mode simulation.

    Attributes
    ----------
    name : str
    params : int
        Trainable parameters.
    macs_per_sample : int
        Forward multiply-adds per sample (convolutions and fully connected layers).
    flops_per_sample : int
        Forward FLOPs per sample, ``2 * macs_per_sample``.
    input_shape : (H, W, C) tuple of int
    n_classes : int
    source : str
        Where the architecture and the published figures come from.
    layers : tuple of LayerRow
        The table the numbers were summed from.
    """

    name: str
    params: int
    macs_per_sample: int
    flops_per_sample: int
    input_shape: tuple
    n_classes: int
    source: str
    layers: tuple = ()

    @property
    def grad_nbytes(self):
        """Bytes of one float32 gradient: ``4 * params``."""
        return 4 * self.params


class _Table:
    """Builds a layer table while tracking the activation shape (H, W, C)."""

    def __init__(self, input_shape):
        self.shape, self.rows = tuple(input_shape), []

    def conv(self, name, cout, k, stride=1, padding=0, bias=False, source_shape=None):
        """Convolution k x k; ``source_shape`` overrides the input (for shortcut branches)."""
        H, W, cin = source_shape or self.shape
        Ho, Wo = (H + 2 * padding - k) // stride + 1, (W + 2 * padding - k) // stride + 1
        params = k * k * cin * cout + (cout if bias else 0)
        self.rows.append(
            LayerRow(name, "conv", params, Ho * Wo * cout * k * k * cin, (Ho, Wo, cout))
        )
        self.shape = (Ho, Wo, cout)
        return self.shape

    def bn(self, name):
        C = self.shape[-1]
        self.rows.append(LayerRow(name, "bn", 2 * C, 0, self.shape))

    def pool(self, k, stride, padding=0):
        """Max or average pooling: changes the shape, has no parameters and no counted MACs."""
        H, W, C = self.shape
        self.shape = ((H + 2 * padding - k) // stride + 1, (W + 2 * padding - k) // stride + 1, C)

    def linear(self, name, dout):
        din = math.prod(self.shape)
        self.rows.append(LayerRow(name, "linear", din * dout + dout, din * dout, (dout,)))
        self.shape = (dout,)


def _resnet18_cifar(n_classes=10):
    t = _Table((32, 32, 3))
    t.conv("conv1", 64, 3, padding=1)
    t.bn("bn1")
    for stage, (planes, stride) in enumerate(((64, 1), (128, 2), (256, 2), (512, 2)), start=1):
        for block in range(2):
            s, before = (stride if block == 0 else 1), t.shape
            prefix = f"layer{stage}.{block}"
            t.conv(f"{prefix}.conv1", planes, 3, stride=s, padding=1)
            t.bn(f"{prefix}.bn1")
            t.conv(f"{prefix}.conv2", planes, 3, padding=1)
            t.bn(f"{prefix}.bn2")
            if s != 1 or before[-1] != planes:  # projection shortcut: 1x1 conv + BN
                t.conv(f"{prefix}.shortcut.0", planes, 1, stride=s, source_shape=before)
                t.bn(f"{prefix}.shortcut.1")
    t.pool(4, 4)
    t.linear("linear", n_classes)
    return t


_VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def _vgg16_cifar(n_classes=10):
    t = _Table((32, 32, 3))
    for i, v in enumerate(_VGG16):
        if v == "M":
            t.pool(2, 2)
        else:
            t.conv(f"features.{i}.conv", v, 3, padding=1, bias=True)
            t.bn(f"features.{i}.bn")
    t.linear("classifier", n_classes)
    return t


def _cnn_cifar(n_classes=10):
    """``models``' numpy ``cnn`` on 32x32x3 (`models.build_model`): 5x5 convolutions with bias
    and zero padding 2, each followed by 2x2 max pooling (and ReLU), then one dense layer."""
    t = _Table((32, 32, 3))
    t.conv("conv1", 16, 5, padding=2, bias=True)
    t.pool(2, 2)
    t.conv("conv2", 32, 5, padding=2, bias=True)
    t.pool(2, 2)
    t.linear("dense1", n_classes)
    return t


def _resnet50_imagenet(n_classes=1000):
    t = _Table((224, 224, 3))
    t.conv("conv1", 64, 7, stride=2, padding=3)
    t.bn("bn1")
    t.pool(3, 2, padding=1)
    for stage, (width, blocks, stride) in enumerate(
        ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), start=1
    ):
        for block in range(blocks):
            s, before, prefix = (stride if block == 0 else 1), t.shape, f"layer{stage}.{block}"
            t.conv(f"{prefix}.conv1", width, 1)
            t.bn(f"{prefix}.bn1")
            t.conv(f"{prefix}.conv2", width, 3, stride=s, padding=1)  # v1.5: stride here
            t.bn(f"{prefix}.bn2")
            t.conv(f"{prefix}.conv3", 4 * width, 1)
            t.bn(f"{prefix}.bn3")
            if block == 0:  # projection shortcut: 1x1 conv + BN
                t.conv(f"{prefix}.downsample.0", 4 * width, 1, stride=s, source_shape=before)
                t.bn(f"{prefix}.downsample.1")
    t.pool(t.shape[0], 1)  # global average pooling
    t.linear("fc", n_classes)
    return t


_NETWORKS = {
    "resnet18": (
        _resnet18_cifar,
        (32, 32, 3),
        10,
        "ResNet-18, CIFAR variant of kuangliu/pytorch-cifar (BasicBlock, 3x3 stem, no "
        "max pooling); published 11,173,962 params, 0.56 GMACs",
    ),
    "vgg16": (
        _vgg16_cifar,
        (32, 32, 3),
        10,
        "VGG-16 with BatchNorm, CIFAR variant of kuangliu/pytorch-cifar (one 512->10 "
        "classifier); published 14,728,266 params, 0.31 GMACs",
    ),
    "resnet50": (
        _resnet50_imagenet,
        (224, 224, 3),
        1000,
        "ResNet-50 v1.5, torchvision resnet50, ImageNet 224x224; published 25,557,032 "
        "params, 4.09 GMACs (torchvision's 4.09 GFLOPS)",
    ),
    "cnn-cifar": (
        _cnn_cifar,
        (32, 32, 3),
        10,
        "this project's numpy cnn (models.build_model('cnn', (32, 32, 3), 10)): conv 5x5 3->16, "
        "pool, conv 5x5 16->32, pool, dense 2048->10; 34,538 params, 4.53 M MACs, the same "
        "count as its flops_per_sample",
    ),
}
PROFILES = tuple(_NETWORKS)


def profile(name):
    """The `Profile` of a named network, computed from its layer table.

    Parameters
    ----------
    name : {"resnet18", "vgg16", "resnet50", "cnn-cifar"}

    Returns
    -------
    Profile

    Raises
    ------
    ValueError
        Unknown name.

    Examples
    --------
    >>> profile("resnet18").params
    11173962
    >>> round(profile("vgg16").flops_per_sample / 1e9, 3)
    0.626
    """
    if name not in _NETWORKS:
        raise ValueError(f"profile must be one of {', '.join(PROFILES)}, got {name!r}")
    build, input_shape, n_classes, source = _NETWORKS[name]
    rows = tuple(build(n_classes).rows)
    macs = sum(r.macs for r in rows)
    return Profile(
        name=name,
        params=sum(r.params for r in rows),
        macs_per_sample=macs,
        flops_per_sample=2 * macs,
        input_shape=input_shape,
        n_classes=n_classes,
        source=source,
        layers=rows,
    )
