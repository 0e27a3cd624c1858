import math

import pytest
import torch
from cases import BS, case, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)


def one(name, fn, marks=()):
    return case(name, fn, [X], [BS], [X2], marks=marks)


SIZES = [
    one("sym_size", lambda x: torch.arange(x.shape[1])),
    one("sym_size_negative", lambda x: torch.arange(x.size(-2))),
    one("sym_numel", lambda x: torch.arange(x.numel())),
    one("getitem", lambda x: x.max(-1)[1]),
    one("sym_output", lambda x: x.shape[1] * 2),
]


ARITHMETIC = [
    one("add_mul", lambda x: torch.arange(x.shape[0] * x.shape[1] + 1)),
    one("sub", lambda x: torch.arange(x.shape[1] - 1)),
    one("neg", lambda x: torch.arange(-x.shape[1], 0)),
    one("truediv", lambda x: x * (x.shape[1] / 2)),
    one("floordiv", lambda x: torch.arange(x.shape[1] // 2)),
    one("mod", lambda x: torch.arange(x.shape[1] % 3 + 1)),
    one("pow", lambda x: torch.arange(x.shape[0] ** 2)),
    one("sym_max", lambda x: torch.arange(torch.sym_max(x.shape[1], 4))),
    one("sym_min", lambda x: torch.arange(torch.sym_min(x.shape[1], 4))),
    one("sym_float", lambda x: x * torch.sym_float(x.shape[1])),
    one("sym_int", lambda x: torch.arange(torch.sym_int(x.shape[1] / 2))),
    one("trunc", lambda x: torch.arange(math.trunc(x.shape[1] / 2))),
    one("ceil", lambda x: torch.arange(math.ceil(x.shape[1] / 2))),
    one("floor", lambda x: torch.arange(math.floor(x.shape[1] / 2))),
]


LOGIC = [
    one("gt", lambda x: x * (x.shape[1] > 3)),
    one("ge", lambda x: x * (x.shape[1] >= 3)),
    one("lt", lambda x: x * (x.shape[1] < 4)),
    one("le", lambda x: x * (x.shape[1] <= 3)),
    one("eq", lambda x: x * (x.shape[1] == 3)),
    one("ne", lambda x: x * (x.shape[1] != 3)),
    one("and", lambda x: x * ((x.shape[1] > 2) & (x.shape[0] < 3))),
    one("or", lambda x: x * ((x.shape[1] > 5) | (x.shape[0] < 3))),
    one("sym_not", lambda x: x * torch.sym_not(x.shape[1] > 3)),
]


@pytest.mark.parametrize("fn,args,dynamic,other", SIZES + ARITHMETIC + LOGIC)
def test_symbolic(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
