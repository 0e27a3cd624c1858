import pytest
import torch
import torch.nn.functional as F

from mobius.testing.lowering import check_lowering
from tests.lowering.cases import BS, case, randint, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
Z, Z2 = randn(2, 3, 4, 5), randn(5, 7, 4, 5)
N = {0: "n"}
IDX, IDX2 = (
    torch.tensor([0, 2, -1]),
    torch.tensor([1, 0, 3, 3, -2]),
)  # into the static axis of size 4


def one(name, fn, x=(X, X2), marks=()):
    return case(name, fn, [x[0]], [BS], [x[1]], marks=marks)


def with_index(name, fn, x=(X, X2), idx=(IDX, IDX2), marks=()):
    return case(name, fn, [x[0], idx[0]], [BS, N], [x[1], idx[1]], marks=marks)


INDEX = [
    with_index("index_last_axis", lambda x, i: x[:, :, i]),
    with_index("index_first_axis", lambda x, i: x.transpose(0, 2)[i]),
    with_index("index_middle_of_4d", lambda x, i: x[:, :, i], (Z, Z2)),
    with_index("index_int32", lambda x, i: x[..., i.int()]),
    with_index("index_two_tensors", lambda x, i: x[:, i.abs() % 2, i]),
    with_index("index_two_tensors_leading", lambda x, i: x.permute(2, 1, 0)[i, i.abs() % 3]),
    with_index("index_two_broadcast", lambda x, i: x[:, i[:, None].abs() % 2, i[None, :2]]),
    with_index("index_2d_index", lambda x, i: x[:, :, i.view(-1, 1)]),
    with_index("index_select", lambda x, i: x.index_select(-1, i.abs())),
    one("index_bool_mask_all_dims", lambda x: x[x > 0]),
    one("index_bool_mask_leading", lambda x: x[x[:, :, 0] > 0]),
    one("index_bool_mask_trailing", lambda x: x[:, x[0, :, 0] > 0]),
    one("index_bool_mask_2d_trailing", lambda x: x.permute(2, 0, 1)[:, x[..., 0] > 0]),
    # the true positions (a mask broadcast over the last axis) take the source's elements in order
    one("masked_scatter_broadcast", lambda x: x.masked_scatter(x[..., :1] > 0, x * 3 + 1)),
]


def _reduced_rows(x, reduce, include_self):
    """Rows of x reduced into 3 rows by position (0, 1, 0, 1, ...): row 2 receives nothing."""
    rows = (torch.arange(x.shape[1]) % 2).view(1, -1, 1).expand_as(x)
    start = torch.full((x.shape[0], 3, x.shape[2]), 0.5).to(x.dtype)
    return start.scatter_reduce(1, rows, x, reduce, include_self=include_self)


GATHER_SCATTER = [
    case(
        "gather",
        lambda x, i: x.gather(-1, i),
        [X, randint(0, 4, 2, 3, 2)],
        [BS, BS],
        [X2, randint(0, 4, 5, 7, 2)],
    ),
    case(
        "gather_dim1",
        lambda x, i: torch.gather(x, 1, i),
        [X, randint(0, 3, 2, 2, 4)],
        [BS, {0: "b"}],
        [X2, randint(0, 7, 5, 2, 4)],
    ),
    one(
        "scatter_src",
        lambda x: x.scatter(
            -1, torch.tensor([[[3, 0]]]).expand(x.shape[0], x.shape[1], 2), x[..., :2] * 10
        ),
    ),
    one("scatter_value", lambda x: x.scatter(-1, x.argmax(-1, keepdim=True), 0.0)),
    one(
        "scatter_reduce_add",
        lambda x: x.scatter(2, torch.zeros_like(x, dtype=torch.int64), x, reduce="add"),
    ),
    one(
        "scatter_reduce_multiply",
        lambda x: x.scatter(2, x.argmin(-1, keepdim=True), 3.0, reduce="multiply"),
    ),
    one("scatter_add", lambda x: x.scatter_add(-1, (x > 0).long() * 3, x)),
    *[
        one(
            f"scatter_reduce_{reduce}{'' if include_self else '_without_self'}",
            lambda x, reduce=reduce, include_self=include_self: _reduced_rows(
                x, reduce, include_self
            ),
        )
        for reduce in ("sum", "prod", "mean", "amax", "amin")
        for include_self in (True, False)
    ],
    one(
        "scatter_reduce_amax_int",
        lambda x: _reduced_rows((x * 10).long(), "amax", include_self=False),
    ),
    one("tril", torch.tril),
    one("triu_diagonal", lambda x: x.triu(1)),
    one("tril_negative_diagonal", lambda x: torch.tril(x, diagonal=-1)),
    one("tril_bool", lambda x: (x > 0).tril()),
    one("triu_symbolic_diagonal", lambda x: x.triu(x.shape[1] - 3)),
    one("causal_mask", lambda x: torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()),
]


@pytest.mark.parametrize("fn,args,dynamic,other", INDEX + GATHER_SCATTER)
def test_indexing(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


class _SliceAssign(torch.nn.Module):
    def forward(self, x, src):
        y = x.clone()
        y[:, :, 2:5] = src
        return y


class _SelectAssign(torch.nn.Module):
    def forward(self, x, src):
        y = x.clone()
        y[:, 1] = src
        return y


class _CopyInto(torch.nn.Module):
    def forward(self, x, src):
        y = torch.zeros_like(x)
        y.copy_(src)
        return y


def test_slice_scatter_dynamic():
    check_lowering(
        _SliceAssign(),
        [torch.randn(2, 3, 8), torch.randn(2, 3, 3)],
        [{0: "b"}, {0: "b"}],
        [torch.randn(4, 3, 8), torch.randn(4, 3, 3)],
    )


def test_select_scatter_dynamic():
    check_lowering(
        _SelectAssign(),
        [torch.randn(2, 3, 8), torch.randn(2, 8)],
        [{0: "b", 2: "s"}, {0: "b", 1: "s"}],
        [torch.randn(4, 3, 5), torch.randn(4, 5)],
    )


def test_copy_broadcasts_and_casts():
    check_lowering(
        _CopyInto(),
        [torch.randn(2, 3, 4), torch.randn(3, 4)],
        [{0: "b"}, {}],
        [torch.randn(5, 3, 4), torch.randn(3, 4)],
    )


ROWS, ROWS2 = torch.tensor([2, 0, 2]), torch.tensor([1, 1, 0, 4])  # repeated rows add up
ADD_ONE_HOT = [
    case(
        "index_add",
        lambda x, i, s: x.index_add(1, i, s),
        [X, ROWS, randn(2, 3, 4)],
        [BS, {0: "n"}, {0: "b", 1: "n"}],
        [randn(5, 7, 4), ROWS2, randn(5, 4, 4)],
    ),
    case(
        "index_add_alpha_last_axis",
        lambda x, i, s: torch.index_add(x, -1, i, s, alpha=0.5),
        [X, ROWS, randn(2, 3, 3)],
    ),
    case(
        "index_copy",
        lambda x, i, s: x.index_copy(0, i, s),
        [randn(5, 3), torch.tensor([4, 0]), randn(2, 3)],
        [{1: "s"}, {0: "n"}, {0: "n", 1: "s"}],
        [randn(5, 6), torch.tensor([1, 3, 2]), randn(3, 6)],
    ),
    case("one_hot", lambda a: F.one_hot(a, 6), [randint(0, 6, 2, 3)], [BS], [randint(0, 6, 4, 5)]),
]


@pytest.mark.parametrize("fn,args,dynamic,other", ADD_ONE_HOT)
def test_index_add_copy_and_one_hot(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
