import pytest
import torch

from tests.lowering.cases import BS, case, randint, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
A, A2 = randint(-9, 10, 2, 3, 4), randint(-9, 10, 5, 7, 4)


def one(name, fn, x=(X, X2), marks=()):
    return case(name, fn, [x[0]], [BS], [x[1]], marks=marks)


ARANGE = [
    one("arange_symbolic", lambda x: torch.arange(x.shape[1])),
    one("arange_start_end", lambda x: torch.arange(1, x.shape[1] + 3)),
    one("arange_step", lambda x: torch.arange(x.shape[0], 20, 3)),
    one("arange_float_dtype", lambda x: torch.arange(x.shape[1], dtype=torch.float32)),
    one("arange_float_step", lambda x: torch.arange(0, x.shape[1], 0.5)),
    one(
        "arange_int_dtype_float_step",
        lambda x: torch.arange(0, 5, 1.5, dtype=torch.int64) + x.shape[1],
    ),
    one(
        "arange_int_float_bounds",
        lambda x: torch.arange(1, 5.5, 1.5, dtype=torch.int64) * x.shape[0],
    ),
    one("arange_int32", lambda x: torch.arange(x.shape[1], dtype=torch.int32)),
    one("arange_plus_tensor", lambda x: x + torch.arange(4)),
]


FILL = [
    one("full_static", lambda x: x + torch.full((4,), 2.5)),
    one("full_symbolic", lambda x: torch.full((x.shape[0], x.shape[1]), 7)),
    one("full_bool", lambda x: torch.full((x.shape[1], 2), True)),
    one("full_symbolic_fill", lambda x: torch.full((2,), x.shape[1])),
    one("zeros", lambda x: torch.zeros(x.shape[0], x.shape[1] + 1)),
    one("ones", lambda x: torch.ones(x.shape[1], dtype=torch.int64)),
    one("empty", lambda x: torch.cat([x, torch.empty(x.shape[0], 0, 4)], 1)),
    one("new_zeros", lambda x: x.new_zeros(x.shape[0], 3)),
    one("new_ones", lambda a: a.new_ones((a.shape[1],)), (A, A2)),
    one("new_empty", lambda x: torch.cat([x, x.new_empty(x.shape[0], x.shape[1], 0)], -1)),
    one("new_full", lambda x: x.new_full((x.shape[1], 2), -1.5)),
    one("zeros_like", torch.zeros_like),
    one("ones_like", lambda a: torch.ones_like(a), (A, A2)),
    one("ones_like_dtype", lambda x: torch.ones_like(x, dtype=torch.int64)),
    one("empty_like", lambda x: torch.cat([x, torch.empty_like(x[:, :0])], 1)),
    one("full_like", lambda x: torch.full_like(x, 3.0)),
    one("full_like_bool", lambda x: torch.full_like(x, True, dtype=torch.bool)),
    one("scalar_tensor", lambda x: x + torch.scalar_tensor(2.0)),
    one("scalar_tensor_symbolic", lambda x: torch.scalar_tensor(x.shape[1]) * x),
    one("fill_", lambda x: x.clone().fill_(2.0)),
    one("fill_int", lambda a: a.clone().fill_(3), (A, A2)),
    one("fill_tensor", lambda x: torch.ops.aten.fill(x, x.sum())),
]


CAST = [
    one("to_int", lambda x: (x * 3).to(torch.int64)),
    one("to_bool", lambda x: x.round().to(torch.bool)),
    one("to_float64", lambda x: x.to(torch.float64)),
    one("to_same", lambda x: x.to(torch.float32) + 1),
    one("int_to_float", lambda a: a.float(), (A, A2)),
    one("to_copy", lambda x: torch.ops.aten._to_copy(x, dtype=torch.int32)),
    case("type_as", lambda x, a: (x * 3).type_as(a), [X, A], [BS, BS], [X2, A2]),
]


NO_OP = [
    one("assert_tensor_metadata", lambda x: x.to(torch.float32) * 2),
    one("assert_scalar", lambda x: x[x > 0]),
    one("assert_async", lambda x: torch.ops.aten._assert_async(x.abs().sum() >= 0) or x + 1),
]


@pytest.mark.parametrize("fn,args,dynamic,other", ARANGE + FILL + CAST + NO_OP)
def test_creation(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


LINSPACE = [
    one("linspace", lambda x: x[0, 0, 0] + torch.linspace(-1.5, 2.0, 7)),
    one("linspace_one_point", lambda x: x[0, 0, :1] + torch.linspace(3.0, 5.0, 1)),
    one("linspace_two_points", lambda x: x[0, 0, :2] + torch.linspace(3.0, 5.0, 2)),
    one("linspace_int", lambda x: x.shape[1] + torch.linspace(0, 10, 6, dtype=torch.int64)),
    one("linspace_tensor_ends", lambda x: torch.linspace(x.min(), x.max(), 9)),
    one("eye_symbolic", lambda x: torch.eye(x.shape[1]) * 2),
    one("eye_rectangular_bool", lambda x: torch.eye(x.shape[1], 4, dtype=torch.bool)),
    case("eye_int", lambda x: x[0] + torch.eye(3, 4, dtype=torch.int64), [X]),
]


@pytest.mark.parametrize("fn,args,dynamic,other", LINSPACE)
def test_linspace_and_eye(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
