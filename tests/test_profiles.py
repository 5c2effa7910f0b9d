"""Large-model profiles: parameter counts computed from layer tables equal the published ones."""

import pytest

from models import PROFILES, profile


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("resnet18", 11_173_962),  # kuangliu/pytorch-cifar ResNet18 (torchsummary, thop)
        ("vgg16", 14_728_266),  # kuangliu/pytorch-cifar VGG('VGG16')
        ("resnet50", 25_557_032),  # torchvision resnet50, num_params in its documentation
    ],
)
def test_parameter_count_equals_published(name, params):
    p = profile(name)
    assert p.params == params
    assert p.grad_nbytes == 4 * params


@pytest.mark.parametrize(
    ("name", "gmacs"), [("resnet18", 0.56), ("vgg16", 0.31), ("resnet50", 4.09)]
)
def test_multiply_adds_round_to_published(name, gmacs):
    """Published to two decimals in G multiply-adds; FLOPs are twice that."""
    p = profile(name)
    assert round(p.macs_per_sample / 1e9, 2) == gmacs
    assert p.flops_per_sample == 2 * p.macs_per_sample


def test_resnet50_exact_multiply_adds_and_layer_rows():
    p = profile("resnet50")
    assert p.macs_per_sample == 4_089_184_256
    rows = {row.name: row for row in p.layers}
    assert rows["conv1"].params == 7 * 7 * 3 * 64 and rows["conv1"].output_shape == (112, 112, 64)
    assert rows["conv1"].macs == 112 * 112 * 64 * 7 * 7 * 3
    assert rows["layer4.2.conv3"].output_shape == (7, 7, 2048)
    assert rows["fc"].params == 2048 * 1000 + 1000
    assert sum(row.kind == "conv" for row in p.layers) == 53  # 49 + 4 projection shortcuts


def test_profile_fields():
    for name in PROFILES:
        p = profile(name)
        assert p.name == name and p.source
        assert p.input_shape == ((224, 224, 3) if name == "resnet50" else (32, 32, 3))
        assert p.n_classes == (1000 if name == "resnet50" else 10)
        assert p.layers[-1].output_shape == (p.n_classes,)


def test_unknown_profile_is_one_line_error():
    with pytest.raises(
        ValueError,
        match=r"^profile must be one of resnet18, vgg16, resnet50, cnn-cifar, "
        r"got 'alexnet'$",
    ):
        profile("alexnet")
