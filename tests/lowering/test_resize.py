import pytest
import torch.nn.functional as F

from tests.lowering.cases import case, randn, run

IMAGE = [randn(2, 3, 5, 7)]


def resized(name, **kwargs):
    return case(name, lambda x: F.interpolate(x, **kwargs), IMAGE)


GRID = randn(2, 4, 6, 2) * 0.8  # sampling points, some past the edge


def sampled(name, **kwargs):
    return case(name, lambda x, g: F.grid_sample(x, g, **kwargs), [IMAGE[0], GRID])


CASES = [
    sampled("grid_sample_bilinear", mode="bilinear", align_corners=False),
    sampled("grid_sample_bicubic_border", mode="bicubic", padding_mode="border"),
    sampled("grid_sample_nearest_corners", mode="nearest", align_corners=True),
    resized("bilinear_to_size", size=(8, 4), mode="bilinear"),
    resized("bilinear_by_scale", scale_factor=1.5, mode="bilinear"),
    resized("bilinear_align_corners", size=(9, 11), mode="bilinear", align_corners=True),
    resized("bicubic_to_size", size=(8, 12), mode="bicubic"),
    resized("nearest_by_scale", scale_factor=2.0, mode="nearest"),
    resized("nearest_to_size", size=(7, 10), mode="nearest"),
    case(
        "linear_1d_by_scale",
        lambda x: F.interpolate(x, scale_factor=2.5, mode="linear"),
        [randn(2, 3, 5)],
    ),
    case(
        "linear_1d_align_corners",
        lambda x: F.interpolate(x, size=9, mode="linear", align_corners=True),
        [randn(2, 3, 5)],
    ),
    case("nearest_1d_by_scale", lambda x: F.interpolate(x, scale_factor=3.0), [randn(2, 3, 5)]),
    case("nearest_1d_to_size", lambda x: F.interpolate(x, size=11), [randn(2, 3, 5)]),
    case(
        "nearest_3d_by_scale", lambda x: F.interpolate(x, scale_factor=2.0), [randn(1, 2, 3, 4, 5)]
    ),
    case("nearest_3d_to_size", lambda x: F.interpolate(x, size=(5, 3, 8)), [randn(1, 2, 3, 4, 5)]),
    case(
        "bilinear_dynamic_batch",
        lambda x: F.interpolate(x, size=(6, 6), mode="bilinear"),
        IMAGE,
        [{0: "b"}],
        [randn(3, 3, 5, 7)],
    ),
]


@pytest.mark.parametrize(("fn", "args", "dynamic", "other"), CASES)
def test_resize(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
