import math
import operator

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import onnxscript
import pytest
import torch

from lowering import LoweringContext, find_lowering
from tests.lowering.cases import BS, case, randn, run

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


# Targets that torch.export folds away before they reach a graph (sym_int becomes math.trunc,
# ``not`` on a SymBool is evaluated, range constraints move into the range metadata), so their
# lowerings are run directly on a hand-built FX node.
def _lower_direct(target, value: int | bool, dtype: ir.DataType, traced_out) -> np.ndarray | None:
    graph = torch.fx.Graph()
    placeholder = graph.placeholder("s")
    placeholder.meta["val"] = value
    node = graph.call_function(target, (placeholder,))
    node.meta["val"] = traced_out
    model_graph = ir.Graph([], [], nodes=[], opset_imports={"": 23})
    builder = onnxscript.GraphBuilder(model_graph)
    ctx = LoweringContext(builder.op)
    ctx.env[placeholder] = builder.input("s", dtype, ir.Shape([]))
    result = find_lowering(target)(ctx, node)
    if result is None:
        return None
    builder.add_output(builder.op.Identity(result), "out")
    proto = ir.serde.serialize_model(ir.Model(model_graph, ir_version=10))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"s": np.asarray(value, dtype=dtype.numpy())})[0]


@pytest.mark.parametrize("value", [3.7, -2.5])
def test_sym_int_direct(value):
    out = _lower_direct(torch.sym_int, value, ir.DataType.DOUBLE, int(value))
    assert out.dtype == np.int64 and out == int(value)


@pytest.mark.parametrize("target", [operator.not_, torch.sym_not])
@pytest.mark.parametrize("value", [True, False])
def test_not_direct(target, value):
    out = _lower_direct(target, value, ir.DataType.BOOL, not value)
    assert out.dtype == np.bool_ and out == (not value)


@pytest.mark.parametrize(
    "target",
    [
        torch.ops.aten.sym_constrain_range.default,
        torch.ops.aten.sym_constrain_range_for_size.default,
    ],
)
def test_range_constraints_emit_nothing(target):
    assert _lower_direct(target, 3, ir.DataType.INT64, None) is None
