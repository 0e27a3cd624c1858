import pytest
import torch

from tests.lowering.cases import BS, case, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
Y, Y2 = randn(2, 3, 4), randn(5, 7, 4)
Z, Z2 = randn(2, 3, 4, 6), randn(5, 7, 4, 6)
V, V2 = randn(6), randn(9)
BSD = {0: "b", 1: "s", 2: "d"}
X2b = randn(2, 7, 4)
X3, X32 = randn(2, 3, 4), randn(5, 7, 6)
ONE_TOKEN = randn(5, 1, 4)  # a slice one token short of it is empty


def one(name, fn, x=(X, X2), dyn=BS, marks=()):
    return case(name, fn, [x[0]], [dyn], [x[1]], marks=marks)


def two(name, fn, x=(X, X2), y=(Y, Y2), marks=()):
    return case(name, fn, [x[0], y[0]], [BS, BS], [x[1], y[1]], marks=marks)


RESHAPE = [
    one("view_symbolic", lambda x: x.view(x.shape[0], x.shape[1], 2, -1)),
    one("view_merge", lambda x: x.view(x.shape[0] * x.shape[1], 4)),
    one("view_minus_one", lambda x: x.view(x.shape[0], -1)),
    one("reshape_all_dynamic", lambda x: x.reshape(-1), (X3, X32), BSD),
    one("reshape_transposed", lambda x: x.transpose(1, 2).reshape(x.shape[0], -1)),
    one("unsafe_view", lambda x: torch.ops.aten._unsafe_view(x, [x.shape[0], -1])),
    two("view_as", lambda x, y: (x + 1).view_as(y)),
    two("reshape_as", lambda x, y: x.transpose(0, 1).reshape_as(y)),
    one("flatten", lambda x: x.flatten(1), (Z, Z2)),
    one("flatten_middle", lambda x: x.flatten(1, 2), (Z, Z2)),
    one("flatten_all", lambda x: x.flatten(), (Z, Z2)),
    one("flatten_last", lambda x: x.flatten(-2), (Z, Z2)),
    one("unflatten_static", lambda x: x.unflatten(-1, (2, 2))),
    one("unflatten_minus_one", lambda x: x.unflatten(-1, (-1, 2))),
    one("unflatten_dynamic_axis", lambda x: x.unflatten(1, (x.shape[1], 1))),
    # an empty slice unflattened: ONNX reads a 0 in a shape as "keep the input's size" but for
    # allowzero
    one(
        "unflatten_zero_size",
        lambda x: x[:, :0].flatten(0, 1).unflatten(0, (x.shape[0], 0)).sum(1) + x[:, 0],
    ),
    one(
        "view_runtime_zero_size",
        lambda x: x[:, 1:].reshape(-1).reshape(x.shape[0], x.shape[1] - 1, 4),
        (X, ONE_TOKEN),
    ),
]


PERMUTE = [
    one("transpose", lambda x: x.transpose(0, 2)),
    one("transpose_negative", lambda x: x.transpose(-1, -2)),
    one("t", lambda x: x[0].t()),
    one("t_vector", lambda v: v.t() * 2, (V, V2), {0: "n"}),
    one("numpy_T", lambda x: x[0].T),
    one("permute", lambda x: x.permute(2, 0, 1)),
    one("permute_negative", lambda x: x.permute(0, -1, -2)),
    one("contiguous", lambda x: x.transpose(0, 1).contiguous()),
    one("clone", lambda x: x.clone() + 1),
    one("detach", lambda x: x.detach()),
    one("alias", lambda x: torch.ops.aten.alias(x) * 2),
    one("dropout_eval", lambda x: torch.nn.functional.dropout(x, 0.5, training=False)),
    one("feature_dropout_eval", lambda x: torch.ops.aten.feature_dropout(x, 0.5, False)),
    one("lift_fresh_copy", lambda x: torch.ops.aten.lift_fresh_copy(x) + 1),
]


SQUEEZE_EXPAND = [
    one("unsqueeze", lambda x: x.unsqueeze(1)),
    one("unsqueeze_negative", lambda x: x.unsqueeze(-1)),
    one("squeeze_dim", lambda x: x[:, :1].squeeze(1)),
    one("squeeze_dims", lambda x: x[:1, :, :1].squeeze((0, 2))),
    one("squeeze_all_static", lambda x: x[:, :1, :1].squeeze()),
    one("squeeze_not_one", lambda x: x.squeeze(-1)),
    one("expand", lambda x: x[:, :, :1].expand(-1, -1, 5)),
    one("expand_new_dim", lambda x: x.expand(3, -1, -1, -1)),
    one("expand_symbolic", lambda x: x[:, :1].expand(x.shape[0], x.shape[1] * 2, 4)),
    case(
        "expand_as",
        lambda x, y: x.expand_as(y),
        [randn(1, 3, 4), X],
        [{1: "s"}, BS],
        [randn(1, 7, 4), X2],
    ),
    one("repeat", lambda x: x.repeat(1, 2, 3)),
    one("repeat_new_dims", lambda x: x.repeat(2, 1, 2, 1)),
    one("flip", lambda x: x.flip(1)),
    one("flip_many", lambda x: x.flip((0, -1))),
    one("roll", lambda x: x.roll(1, 1)),
    one("roll_negative_many", lambda x: x.roll((-2, 3), (1, 2))),
    one("roll_flat", lambda x: x.roll(5)),
]


SLICE = [
    one("slice_start", lambda x: x[:, 1:]),
    one("slice_end", lambda x: x[:, :-1]),
    one("slice_step", lambda x: x[:, ::2]),
    one("slice_step_start", lambda x: x[:, 1::2, 1:3]),
    one("slice_negative_start", lambda x: x[:, -2:]),
    one("slice_symbolic_end", lambda x: x[:, : x.shape[1] - 1]),
    one("slice_noop", lambda x: x[:, :] * 2),
    one("slice_last_dim", lambda x: x[..., 1:3]),
    one("narrow", lambda x: x.narrow(1, 1, 1)),
    one("narrow_symbolic", lambda x: x.narrow(1, 1, x.shape[1] - 1)),
    one("narrow_negative_dim", lambda x: x.narrow(-1, 1, 2)),
    one("select", lambda x: x[:, 0]),
    one("select_negative", lambda x: x[:, -1]),
    one("select_last_dim", lambda x: x.select(-1, 2)),
]


JOIN = [
    two("cat", lambda x, y: torch.cat([x, y], 1)),
    two("cat_negative_dim", lambda x, y: torch.cat([x, y, x], -1)),
    two("cat_promotes", lambda x, y: torch.cat([x, (y > 0).long()], 0)),
    two("concat", lambda x, y: torch.concat([x, y], 0)),
    two("concatenate", lambda x, y: torch.concatenate([x, y], 2)),
    one("cat_empty", lambda x: torch.cat([x.flatten(), torch.zeros(0)])),
    two("stack", lambda x, y: torch.stack([x, y])),
    two("stack_last", lambda x, y: torch.stack([x, y], -1)),
    two("stack_middle", lambda x, y: torch.stack([x, y, x], 1)),
]


def _sum_parts(parts):
    return tuple(p * (i + 1) for i, p in enumerate(parts))


SPLIT = [
    one("split", lambda x: _sum_parts(x.split(2, -1))),
    one("split_uneven", lambda x: _sum_parts(x.split(3, -1))),
    one("split_with_sizes", lambda x: _sum_parts(x.split([1, 3], 2))),
    one("split_one_part", lambda x: _sum_parts(x.split(4, -1))),
    one("chunk", lambda x: _sum_parts(x.chunk(2, -1))),
    one("chunk_static_dim", lambda x: _sum_parts(x.chunk(3, 0)), (X, X2b), {1: "s"}),
    one(
        "chunk_dynamic_dim",
        lambda x: [p * (i + 1) for i, p in enumerate(torch.cat([x, -x, x], 1).chunk(3, 1))],
    ),
    one("split_symbolic_sizes", lambda x: _sum_parts(x.split([1, x.shape[1] - 1], 1))),
    # one part as long as the dynamic axis (Wan Animate's face frames in one chunk)
    one("split_dynamic_one_part", lambda x: _sum_parts(x.split(x.shape[0] * x.shape[1], 1))),
    one("tensor_split", lambda x: _sum_parts(x.tensor_split(3, -1))),
    one("unbind", lambda x: _sum_parts(x.unbind(-1))),
    one("unbind_first", lambda x: _sum_parts(x.unbind(0)), (X, X2b), {1: "s"}),
]


@pytest.mark.parametrize(
    "fn,args,dynamic,other", RESHAPE + PERMUTE + SQUEEZE_EXPAND + SLICE + JOIN + SPLIT
)
def test_shape(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


class _RepeatInterleave(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x.repeat_interleave(3, dim=self.dim)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_repeat_interleave_dynamic(dim):
    from mobius.testing.lowering import check_lowering

    check_lowering(
        _RepeatInterleave(dim), [torch.randn(2, 5, 4)], [{0: "b", 1: "s"}], [torch.randn(3, 2, 4)]
    )


class _RepeatInterleaveBySize(torch.nn.Module):
    def forward(self, x):  # HunyuanVideo's VAE: frame indices repeated height * width times
        return torch.arange(x.shape[0]).repeat_interleave(x.shape[1] * x.shape[2])


def test_repeat_interleave_by_a_symbolic_size():
    from mobius.testing.lowering import check_lowering

    check_lowering(
        _RepeatInterleaveBySize(),
        [torch.randn(2, 5, 4)],
        [{0: "b", 1: "s", 2: "w"}],
        [torch.randn(3, 2, 6)],
    )


class _WeightTransposed(torch.nn.Module):
    """Falcon's linear, ``x @ self.weight.T``; with ``shared`` the weight is also read as is."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(6, 4))
        self.shared = shared

    def forward(self, x):
        y = x @ self.weight.T
        return (y, self.weight.sum()) if self.shared else y


@pytest.mark.parametrize("shared", [False, True])
def test_transpose_of_a_weight_is_a_transposed_initializer(shared):
    """Read by the transpose alone, the weight is stored transposed (``weight.T``) and no
    ``Transpose`` runs; read elsewhere too, it is stored once and transposed in the graph."""
    from lowering.transposed import TransposedTensor
    from mobius.testing.lowering import check_lowering, lower_module

    module = _WeightTransposed(shared)
    x, x2 = torch.randn(2, 3, 4), torch.randn(5, 3, 4)
    model = lower_module(module, [x], [{0: "batch"}])
    transposed = [
        n
        for n, v in model.graph.initializers.items()
        if isinstance(v.const_value, TransposedTensor)
    ]
    ops = {node.op_type for node in model.graph}
    assert (transposed, "Transpose" in ops) == (([], True) if shared else (["weight.T"], False))
    check_lowering(module, [x], [{0: "batch"}], [x2], atol=1e-6)


TRACED_SPLITS = [
    case(
        "tensor_split_at_a_traced_index",
        lambda x: [p * 2 for p in x.tensor_split([x.shape[1] - 1, x.shape[1] + 2], dim=1)],
        [X],
        [BS],
        [X2],
    ),
]


@pytest.mark.parametrize("fn,args,dynamic,other", TRACED_SPLITS)
def test_tensor_split_at_traced_indices(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
