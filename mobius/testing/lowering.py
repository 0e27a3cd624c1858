"""Lower any small torch module through the lowering table and run it with onnxruntime; or export
it and take the node a pattern is matched at."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
import torch
from torch.export.graph_signature import InputKind

from mobius.synth.decompose import decompose_unlowered
from mobius.synth.emit import emit
from mobius.synth.inline import inline_grad_regions
from mobius.synth.trace import WRAPPER_PREFIX, TracedModel
from mobius.tasks.base import TensorSpec
from patterns.base import is_op


class _Wrap(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.m = inner

    def forward(self, *args):
        out = self.m(*args)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def lower_module(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    dynamic: Sequence[dict[int, str]] | None = None,
) -> ir.Model:
    """Export ``module`` on ``args`` (CPU tensors) and lower it; ``dynamic`` names dynamic axes per input."""
    wrapper = _Wrap(module).eval()
    dynamic = list(dynamic) if dynamic is not None else [{} for _ in args]
    shapes = tuple({axis: torch.export.Dim.DYNAMIC for axis in axes} for axes in dynamic)
    program = torch.export.export(wrapper, tuple(args), dynamic_shapes=(shapes,), strict=False)
    program = inline_grad_regions(program)
    program = decompose_unlowered(program)  # as the pipeline does
    with torch.no_grad():
        n_out = len(wrapper(*args))
    specs = [
        TensorSpec(
            f"input_{i}", a.dtype, tuple(dynamic[i].get(d, a.shape[d]) for d in range(a.dim()))
        )
        for i, a in enumerate(args)
    ]
    state = dict(wrapper.state_dict(keep_vars=True))
    constants = {
        k.removeprefix(WRAPPER_PREFIX): v
        for k, v in program.constants.items()
        if isinstance(v, torch.Tensor)
    }
    traced = TracedModel(
        program=program,
        inputs=specs,
        outputs=[f"output_{i}" for i in range(n_out)],
        buffer_values={},
        tied_names={},
        constant_values=constants,
        key_to_param=None,
        dtype=torch.float32,
    )

    def initializer(kind: InputKind, name: str, val: torch.Tensor, persistent: bool) -> ir.Value:
        tensor = state.get(WRAPPER_PREFIX + name)
        tensor = constants[name] if tensor is None else tensor
        from onnx_ir.tensor_adapters import TorchTensor

        data = TorchTensor(tensor.detach().contiguous(), name=name)
        return ir.Value(
            name=name,
            type=ir.TensorType(data.dtype),
            shape=ir.Shape(list(tensor.shape)),
            const_value=data,
        )

    return emit(traced, initializer)


def run_onnx(model: ir.Model, args: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """Run a model built by ``lower_module`` in onnxruntime on CPU."""
    import onnxruntime as ort

    proto = ir.serde.serialize_model(model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {f"input_{i}": a.numpy() for i, a in enumerate(args)}
    return session.run(None, feeds)


def check_lowering(
    module: torch.nn.Module,
    args: Sequence[torch.Tensor],
    dynamic: Sequence[dict[int, str]] | None = None,
    other_args: Sequence[torch.Tensor] | None = None,
    atol: float = 1e-5,
) -> None:
    """Assert onnxruntime matches torch on ``args`` and, if given, on differently shaped ``other_args``."""
    model = lower_module(module, args, dynamic)
    for feed in [args] + ([other_args] if other_args is not None else []):
        with torch.no_grad():  # on copies: a module may write into its inputs
            expected = module(*[a.clone() for a in feed])
        expected = expected if isinstance(expected, (list, tuple)) else (expected,)
        actual = run_onnx(model, feed)
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected, strict=True):
            want = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
            assert got.shape == want.shape, (got.shape, want.shape)
            assert got.dtype == want.dtype, (got.dtype, want.dtype)
            if want.dtype == bool or np.issubdtype(want.dtype, np.integer):
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, atol=atol, rtol=1e-5)


def exported_node(module: torch.nn.Module, args: tuple, op) -> torch.fx.Node:
    """The first node calling ``op`` in ``module`` exported with ``args``."""
    program = torch.export.export(module, args)
    return next(n for n in program.graph.nodes if is_op(n, op))
