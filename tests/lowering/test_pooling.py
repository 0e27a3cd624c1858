import pytest
import torch
import torch.nn.functional as F

from tests.lowering.cases import case, randn, run

torch.manual_seed(0)
IMAGES = (randn(2, 3, 8, 10), randn(3, 3, 12, 6))
DYN = [{0: "b", 2: "h", 3: "w"}]


def images(name, fn):
    return case(name, fn, [IMAGES[0]], DYN, [IMAGES[1]])


def static(name, fn):
    """A static image size (the exact average pooling needs one)."""
    return case(name, fn, [randn(2, 3, 9, 10)])


CASES = [
    images("max_pool2d", lambda x: F.max_pool2d(x, 3, stride=2, padding=1)),
    images("max_pool2d_default_stride", lambda x: F.max_pool2d(x, 2)),
    images(
        "max_pool2d_with_indices_values",
        lambda x: torch.ops.aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1])[0],
    ),
    images("avg_pool2d", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1)),
    images(
        "avg_pool2d_exclude_pad",
        lambda x: F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False),
    ),
    # ceil_mode: a last, partial window (with and without padding counted), one starting in the
    # right padding (dropped by torch), a kernel wider than the image (EfficientNet's pooler)
    static("avg_pool2d_ceil", lambda x: F.avg_pool2d(x, 3, stride=2, ceil_mode=True)),
    static(
        "avg_pool2d_ceil_pad",
        lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),
    ),
    static(
        "avg_pool2d_ceil_pad_exclude",
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    ),
    static("avg_pool2d_ceil_drops_window", lambda x: F.avg_pool2d(x, 2, 2, 1, ceil_mode=True)),
    static("avg_pool2d_ceil_wide_kernel", lambda x: F.avg_pool2d(x, 16, ceil_mode=True)),
    static("max_pool2d_ceil", lambda x: F.max_pool2d(-x.abs(), 3, 2, 1, ceil_mode=True)),
    static("max_pool2d_ceil_drops_window", lambda x: F.max_pool2d(x, 2, 2, 1, ceil_mode=True)),
    static("adaptive_avg_pool2d_uneven", lambda x: F.adaptive_avg_pool2d(x, (4, 3))),
    case(
        "adaptive_avg_pool2d_upsampling",
        lambda x: F.adaptive_avg_pool2d(x, 2),
        [randn(2, 3, 1, 1)],
    ),
    case(
        "adaptive_avg_pool2d_to_grid",
        lambda x: F.adaptive_avg_pool2d(x, (2, 5)),
        [randn(2, 3, 8, 10)],
    ),
    static("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5)),
    images("adaptive_avg_pool2d_to_one", lambda x: F.adaptive_avg_pool2d(x, 1)),
    # over frames too (VidTok's temporal downsampling: a window of 3 frames, stride 2)
    case(
        "avg_pool3d_frames",
        lambda x: F.avg_pool3d(x, (3, 1, 1), stride=(2, 1, 1)),
        [randn(2, 3, 7, 4, 6)],
        [{0: "b", 2: "f", 3: "h", 4: "w"}],
        [randn(1, 3, 9, 5, 3)],
    ),
    # a dynamic image to a grid: overlapping cells (8x10 to 3x4), cells repeated (12x6 to 3x7:
    # more cells than columns), as I2VGen-XL's image context embedding pools to 32x32
    images("adaptive_avg_pool2d_dynamic", lambda x: F.adaptive_avg_pool2d(x, (3, 7))),
    images("adaptive_avg_pool2d_dynamic_more", lambda x: F.adaptive_avg_pool2d(x, (5, 4))),
    # 1-D (an audio VAE's): static lengths dividing and not, dynamic lengths, to one, unbatched
    case("adaptive_avg_pool1d_even", lambda x: F.adaptive_avg_pool1d(x, 4), [randn(2, 3, 12)]),
    case("adaptive_avg_pool1d_uneven", lambda x: F.adaptive_avg_pool1d(x, 5), [randn(2, 3, 12)]),
    case(
        "adaptive_avg_pool1d_dynamic",
        lambda x: F.adaptive_avg_pool1d(x, 5),
        [randn(2, 3, 12)],
        [{0: "b", 2: "t"}],
        [randn(1, 3, 3)],
    ),
    case(
        "adaptive_avg_pool1d_to_one",
        lambda x: F.adaptive_avg_pool1d(x, 1),
        [randn(2, 3, 7)],
        [{0: "b", 2: "t"}],
        [randn(3, 3, 11)],
    ),
    case("adaptive_avg_pool1d_unbatched", lambda x: F.adaptive_avg_pool1d(x, 3), [randn(3, 8)]),
]


@pytest.mark.parametrize(("fn", "args", "dynamic", "other"), CASES)
def test_pooling(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
