"""Lowerings of tensors laid out on grids (``lowering/grids.py``) against torch."""

import pytest
import torch

from tests.lowering.cases import BS, case, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
Z, Z2 = randn(2, 3, 4, 6), randn(5, 7, 4, 6)
V, V2 = randn(6), randn(9)


GRIDS = [
    case("meshgrid_ij", lambda a, b: torch.meshgrid(a, b, indexing="ij"), [V, X[0, :, 0]]),
    case(
        "meshgrid_xy_three",
        lambda a, b, c: torch.meshgrid(a, b, c, indexing="xy"),
        [V, X[0, :, 0], randn(5)],
    ),
    case(
        "meshgrid_dynamic",
        lambda a, b: [g * 2 for g in torch.meshgrid(a, b, indexing="xy")],
        [V, randn(4)],
        [{0: "n"}, {0: "m"}],
        [V2, randn(3)],
    ),
    case("meshgrid_scalar", lambda a, b: torch.meshgrid(a[0], b, indexing="ij"), [V, randn(4)]),
    case(
        "broadcast_tensors",
        lambda x, v, w: torch.broadcast_tensors(x, v, w),
        [Z, randn(4, 1), randn(6)],
        [{0: "b", 1: "s"}, {}, {}],
        [Z2, randn(4, 1), randn(6)],
    ),
    case("diag_embed", torch.diag_embed, [X], [BS], [X2]),
    case("diag_embed_above", lambda x: torch.diag_embed(x, offset=2), [X], [BS], [X2]),
    case("diag_embed_below", lambda x: torch.diag_embed(x, -1, 0, 2), [X], [BS], [X2]),
    case("diag_embed_first_axes", lambda x: torch.diag_embed(x, 1, 1, 0), [X], [BS], [X2]),
    case("diff", torch.diff, [X], [BS], [X2]),
    case("diff_twice_last_axis", lambda x: torch.diff(x, 2, 2), [X], [BS], [X2]),
    case(
        "diff_prepend_append",
        lambda x, p: torch.diff(x, dim=1, prepend=p, append=p * 2),
        [X, randn(2, 2, 4)],
    ),
    case("diff_bool", lambda x: torch.diff(x > 0), [X], [BS], [X2]),
    case(
        "pixel_unshuffle",
        lambda x: torch.nn.functional.pixel_unshuffle(x, 2),
        [randn(2, 3, 4, 6)],
        [{0: "b", 2: "h", 3: "w"}],
        [randn(1, 3, 8, 2)],
    ),
]


@pytest.mark.parametrize("fn,args,dynamic,other", GRIDS)
def test_grids(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
