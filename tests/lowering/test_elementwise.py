import pytest
import torch
import torch.nn.functional as F

from mobius.testing.lowering import check_lowering
from tests.lowering.cases import BS, case, randint, randn, run


class AddScaled(torch.nn.Module):
    def forward(self, x, y):
        return torch.add(x, y, alpha=2.0) * 0.5 - x / (y.abs() + 1)


def test_binary_arithmetic_dynamic_shapes():
    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    x2, y2 = torch.randn(5, 7, 4), torch.randn(5, 7, 4)
    check_lowering(AddScaled(), [x, y], [{0: "b", 1: "s"}, {0: "b", 1: "s"}], [x2, y2])


torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
Y, Y2 = randn(2, 3, 4), randn(5, 7, 4)
A, A2 = randint(-9, 10, 2, 3, 4), randint(-9, 10, 5, 7, 4)
J, J2 = randint(1, 5, 2, 3, 4), randint(1, 5, 5, 7, 4)  # positive divisors
NJ, NJ2 = -J, -J2
B = (X > 0, X2 > 0)
C = (Y > 0, Y2 > 0)
W = randn(4)  # broadcasts against the trailing axis


def one(name, fn, x=(X, X2), marks=()):
    return case(name, fn, [x[0]], [BS], [x[1]], marks=marks)


def two(name, fn, x=(X, X2), y=(Y, Y2), marks=()):
    return case(name, fn, [x[0], y[0]], [BS, BS], [x[1], y[1]], marks=marks)


BINARY = [
    two("add_alpha", lambda x, y: torch.add(x, y, alpha=3)),
    two("sub_alpha", lambda x, y: torch.sub(x, y, alpha=0.5)),
    two("mul", torch.mul),
    two("div", lambda x, y: x / (y.abs() + 0.5)),
    two("maximum", torch.maximum),
    two("minimum", torch.minimum),
    two("add_int", torch.add, A, J),
    two("sub_int_alpha", lambda a, b: torch.sub(a, b, alpha=2), A, J),
    two("fmod_float", lambda x, y: torch.fmod(x * 4, y.abs() + 0.5)),
    two("fmod_int", torch.fmod, A, J),
    two("fmod_int_neg_divisor", torch.fmod, A, NJ),
    two("remainder_float", lambda x, y: torch.remainder(x * 4, y)),
    two("remainder_int", torch.remainder, A, J),
    two("remainder_int_neg_divisor", torch.remainder, A, NJ),
    two("div_floor_float", lambda x, y: torch.div(x * 4, y, rounding_mode="floor")),
    two("div_trunc_float", lambda x, y: torch.div(x * 4, y, rounding_mode="trunc")),
    two("div_floor_int", lambda a, b: torch.div(a, b, rounding_mode="floor"), A, NJ),
    two("div_trunc_int", lambda a, b: torch.div(a, b, rounding_mode="trunc"), A, NJ),
    two("floor_divide_int", torch.floor_divide, A, J),
    two("floor_divide_float", lambda x, y: torch.floor_divide(x * 4, y)),
    two("true_div_int", torch.div, A, J),
    two("pow_tensor", lambda x, y: torch.pow(x.abs() + 0.1, y)),
    two("int_tensor_plus_float_tensor", torch.add, A, Y),
    case("broadcast_vector", lambda x, w: x * w + w, [X, W], [BS, {}], [X2, W]),
]


COMPARE = [
    two("eq", lambda a, b: a == b, A, J),
    two("ne", lambda a, b: a != b, A, J),
    two("lt", torch.lt),
    two("le", torch.le, A, J),
    two("gt", torch.gt),
    two("ge", torch.ge, A, J),
    two("lt_int64_vs_float", lambda a, x: a < x, A, Y),
    two("eq_int64_vs_float", lambda a, x: a == x.round(), A, Y),
    two("ne_float_vs_int64", lambda x, a: x != a, Y, A),
    one("gt_int_float_scalar", lambda a: a > 0.5, (A, A2)),
    one("le_scalar", lambda x: x <= 0.0),
    one("ne_scalar", lambda a: a != 3, (A, A2)),
]


LOGIC = [
    two("and_bool", torch.logical_and, B, C),
    two("or_bool", lambda a, b: a | b, B, C),
    two("xor_bool", lambda a, b: a ^ b, B, C),
    two("aten_and", torch.ops.aten.__and__.Tensor, B, C),
    two("mul_bool", torch.mul, B, C),
    two("add_bool", torch.add, B, C),
    two("maximum_bool", torch.maximum, B, C),
    two("minimum_bool", torch.minimum, B, C),
    two("bitwise_and_int", torch.bitwise_and, A, J),
    two("bitwise_or_int", torch.bitwise_or, A, J),
    two("bitwise_xor_int", torch.bitwise_xor, A, J),
    two("logical_and_float", torch.logical_and, X, Y),
    two("logical_or_int", torch.logical_or, A, J),
    two("logical_xor_int", torch.logical_xor, A, J),
    one("bitwise_not_int", torch.bitwise_not, (A, A2)),
    one("invert_bool", lambda b: ~b, B),
    one("logical_not_float", torch.logical_not),
    one("logical_not_int", torch.logical_not, (A, A2)),
]


SCALAR = [
    one("int_plus_float_scalar", lambda a: a + 0.5, (A, A2)),
    one("int_times_int_scalar", lambda a: a * 3, (A, A2)),
    one("int_div_int_scalar", lambda a: a / 2, (A, A2)),
    one("rsub", lambda x: 1 - x),
    one("rsub_int", lambda a: 2 - a, (A, A2)),
    one("pow_square", lambda x: x**2),
    one("pow_cube", lambda x: torch.pow(x, 3.0)),
    one("pow_int_float_exponent", lambda a: a.abs() ** 0.5, (A, A2)),
    one("scalar_base_pow", lambda x: torch.pow(2.0, x)),
    one("remainder_scalar", lambda x: x % 0.7),
    one("floordiv_int_scalar", lambda a: a // 4, (A, A2)),
    one("div_scalar_floor", lambda a: torch.div(a, -3, rounding_mode="floor"), (A, A2)),
    one("bool_plus_int_scalar", lambda b: b + 2, B),
    one("bool_times_float", lambda b: b * 1.5, B),
]


# composite ops torch.export keeps: lowered directly, or the whole program is traced again
COMPOSITE = [
    one("square", torch.square),
    one("log_sigmoid", lambda x: torch.nn.functional.logsigmoid(x * 40)),
    one("square_int", torch.square, (A, A2)),
    one("square_bool", torch.square, B),
    one("isfinite", lambda x: torch.isfinite(1 / torch.floor(x) + torch.log(x))),
    one("isfinite_int", torch.isfinite, (A, A2)),
    one("nan_to_num", lambda x: torch.nan_to_num(torch.log(x) / torch.floor(x))),
    one(
        "nan_to_num_given",
        lambda x: torch.nan_to_num(torch.log(x) / torch.floor(x), 1.5, 9.0, -7.0),
    ),
    one("nan_to_num_int", torch.nan_to_num, (A, A2)),
    two("multiply", torch.multiply),
    two("subtract_alpha", lambda x, y: torch.subtract(x, y, alpha=2)),
    two("divide", torch.divide),
    two("divide_floor", lambda x, y: torch.divide(x, y, rounding_mode="floor"), A, J),
    two("true_divide", torch.true_divide),
]


UNARY = [
    one("neg", torch.neg),
    one("abs", torch.abs),
    one("abs_int", torch.abs, (A, A2)),
    one("sqrt", lambda x: torch.sqrt(x.abs())),
    one("sqrt_int", lambda a: torch.sqrt(a.abs()), (A, A2)),
    one("exp", torch.exp),
    one("log", lambda x: torch.log(x.abs() + 0.1)),
    one("sin", torch.sin),
    one("cos", torch.cos),
    one("cos_int", torch.cos, (A, A2)),
    one("tanh", torch.tanh),
    one("sigmoid", torch.sigmoid),
    one("relu", torch.relu),
    one("erf", torch.erf),
    one("reciprocal", lambda x: torch.reciprocal(x.abs() + 0.5)),
    one("floor", lambda x: torch.floor(x * 3)),
    one("ceil", lambda x: torch.ceil(x * 3)),
    one("round", lambda x: torch.round(x * 3)),
    one("round_half_even", lambda x: torch.round(torch.floor(x * 6) / 2)),
    one("sign", torch.sign),
    one("sign_int", torch.sign, (A, A2)),
    one("isnan", lambda x: torch.isnan(torch.log(x))),
    one("isinf", lambda x: torch.isinf(1 / torch.floor(x))),
    one("rsqrt", lambda x: torch.rsqrt(x.abs() + 0.1)),
    one("trunc", lambda x: torch.trunc(x * 3)),
    one("atan", torch.atan),
    one("tan", lambda x: torch.tan(x.clamp(-1, 1))),
    one("asin", lambda x: torch.asin(torch.tanh(x))),
    one("acos", lambda x: torch.acos(torch.tanh(x))),
    one("sinh", torch.sinh),
    one("cosh", torch.cosh),
    one("asinh", torch.asinh),
    one("acosh", lambda x: torch.acosh(x.abs() + 1)),
    one("atanh", lambda x: torch.atanh(torch.tanh(x) * 0.9)),
    one("log1p", lambda x: torch.log1p(x.abs())),
    one("expm1", torch.expm1),
    one("log2", lambda x: torch.log2(x.abs() + 0.1)),
]


ACTIVATION = [
    one("silu", F.silu),
    one("gelu", F.gelu),
    one("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    one("softplus", F.softplus),
    one("softplus_beta_threshold", lambda x: F.softplus(x * 4, beta=2.0, threshold=3.0)),
    one("leaky_relu", lambda x: F.leaky_relu(x, 0.2)),
    one("leaky_relu_default", F.leaky_relu),
    one("elu", lambda x: F.elu(x, alpha=0.7)),
    one("mish", F.mish),
    one("hardtanh", lambda x: F.hardtanh(x * 2, -0.5, 1.5)),
]


CLAMP_WHERE = [
    one("clamp", lambda x: torch.clamp(x, -0.5, 0.5)),
    one("clamp_min_only", lambda x: torch.clamp(x, min=0.1)),
    one("clamp_max_only", lambda x: torch.clamp(x, max=0.1)),
    one("clip", lambda x: x.clip(-0.3, 0.2)),
    one("clamp_min", lambda x: x.clamp_min(0.1)),
    one("clamp_max", lambda x: x.clamp_max(0.1)),
    one("clamp_int", lambda a: a.clamp(-2, 3), (A, A2)),
    one("clamp_int_float_bound", lambda a: a.clamp(min=0.5), (A, A2)),
    two("clamp_tensor_bounds", lambda x, y: torch.clamp(x, min=y, max=y + 1)),
    two("where", lambda x, y: torch.where(x > y, x, y)),
    one("where_scalar", lambda x: torch.where(x > 0, x, 0.0)),
    one("where_scalars", lambda x: torch.where(x > 0, 1.0, -1.0)),
    two("where_int_float", lambda a, y: torch.where(y > 0, a, y), A, Y),
    two("where_bool", lambda x, y: torch.where(x > y, x > 0, y > 0)),  # no boolean Where in ORT
    two("masked_fill", lambda x, y: x.masked_fill(y > 0, float("-inf"))),
    one("masked_fill_bool", lambda x: (x > 0).masked_fill(x < -0.5, True)),
    two("masked_fill_int", lambda a, y: a.masked_fill(y > 0, 7), A, Y),
    one("masked_fill_tensor_value", lambda x: x.masked_fill(x < 0, x.sum())),
    two("lerp_scalar", lambda x, y: torch.lerp(x, y, 0.3)),
    two("lerp_tensor", lambda x, y: torch.lerp(x, y, torch.sigmoid(y))),
]


@pytest.mark.parametrize(
    "fn,args,dynamic,other",
    BINARY + COMPARE + LOGIC + SCALAR + UNARY + ACTIVATION + CLAMP_WHERE,
)
def test_elementwise(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


@pytest.mark.parametrize(("fn", "args", "dynamic", "other"), COMPOSITE)
def test_composite(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
