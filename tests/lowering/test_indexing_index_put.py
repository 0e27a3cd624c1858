"""index_put (x[i] = v, x[i] += v) and tensor.item() (_local_scalar_dense)."""

import pytest
import torch

from tests.lowering.cases import BS, case, randint, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
N = {0: "n"}
UNIQUE, UNIQUE2 = torch.tensor([0, 2, -1]), torch.tensor([3, 0, -3])  # into the axis of size 4
DUP, DUP2 = torch.tensor([1, 1, -1]), torch.tensor([1, 0, 3, 3, -1])  # with repeats


def put(name, fn, idx, x=(X, X2), marks=()):
    return case(name, fn, [x[0], idx[0]], [BS, N], [x[1], idx[1]], marks=marks)


def _put(x, indices, v, accumulate=False):
    return torch.ops.aten.index_put(x, indices, v, accumulate)


def expert_scatter(x):
    """JetMoE's MoE: rows gathered per expert by a sort, results written back (accumulated)."""
    flat = x.reshape(-1, 4)
    order = flat[:, 0].sort()[1]
    out = torch.zeros_like(flat)
    return out.index_put((order,), flat[order] * 2, accumulate=True)


CASES = [
    put("last_axis", lambda x, i: _put(x, [None, None, i], x[:, :, :3] * 2), (UNIQUE, UNIQUE2)),
    put("last_axis_scalar", lambda x, i: _put(x, [None, None, i], torch.tensor(7.0)), (DUP, DUP2)),
    put("accumulate", lambda x, i: _put(x, [None, None, i], x[:1, :, :1], True), (DUP, DUP2)),
    put(
        "first_axis_accumulate",
        lambda x, i: _put(x.transpose(0, 2), [i], torch.ones(1, 1), True),
        (DUP, DUP2),
    ),
    put(
        "two_tensors",
        lambda x, i: _put(x, [None, i.abs() % 2, i], x[:, :1, 0] + 1, True),
        (DUP, DUP2),
    ),
    put(
        "in_place_setitem",
        lambda x, i: x.clone().index_put_((i,), x[0, 0, 0]),
        ((UNIQUE.abs() % 2), torch.tensor([1, 0])),
    ),
    case("bool_mask", lambda x: _put(x, [x > 0], torch.tensor(0.0)), [X], [BS], [X2]),
    case(
        "bool_mask_middle",
        lambda x: _put(x, [None, x[0] > 0], x[:, 0, 0].unsqueeze(1) * 0 - 1),
        [X],
        [BS],
        [X2],
    ),
    case("expert_scatter", expert_scatter, [X], [BS], [X2]),
]


@pytest.mark.parametrize("fn,args,dynamic,other", CASES)
def test_index_put(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


def split_by_counts(x, i):
    """tensor.tolist() sizes (unbacked symbols) that split the rows, as JetMoE's experts do."""
    sizes = (i.unsqueeze(1) == torch.arange(4)).sum(0).tolist()
    for s in sizes:
        torch._check(s >= 0)
    torch._check(sum(sizes) == x.shape[0])
    parts = x[i.sort()[1]].split(sizes, 0)
    return torch.cat([p * (k + 1) for k, p in enumerate(parts)])


def scale_by_max(x):
    return x * x.abs().max().item() + x.sum().item()


@pytest.mark.parametrize(
    "fn,args,dynamic,other",
    [
        case(
            "split_by_counts",
            split_by_counts,
            [randn(6, 3), randint(0, 4, 6)],
            [N, N],
            [randn(9, 3), randint(0, 4, 9)],
        ),
        case("float_item", scale_by_max, [X], [BS], [X2]),
    ],
)
def test_item(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
