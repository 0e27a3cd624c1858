"""A module cast inside forward (``self.classifier = self.classifier.to(self.dtype)``, the routers
of Switch Transformers and NLLB-MoE) traces: a no-op in the traced dtype, graph casts in another."""

import pytest
import torch

from mobius.synth.shims import tracing_branches


class CastingRouter(torch.nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.classifier = torch.nn.Linear(8, 4)
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.classifier = self.classifier.to(self.dtype)
        return self.classifier(x.to(self.dtype)).float()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_module_cast_traces_and_computes_the_cast(dtype):
    module = CastingRouter(dtype)
    torch.nn.init.normal_(module.classifier.bias)
    x = torch.randn(3, 8)
    with pytest.raises(RuntimeError, match="Couldn't swap"):
        torch.export.export(module, (x,), strict=False)
    with tracing_branches(module):
        program = torch.export.export(module, (x,), strict=False)
    # the module keeps its own float32 parameters; the graph casts where the dtype differs
    assert module.classifier.weight.dtype == torch.float32
    params = set(program.graph_signature.inputs_to_parameters)
    cast = {
        n.args[0].name
        for n in program.graph.nodes
        if n.target == torch.ops.aten.to.dtype and n.args[0].name in params
    }
    assert cast == (set() if dtype == torch.float32 else params)  # weight and bias, or none
    expected = x.double() @ module.classifier.weight.double().T + module.classifier.bias.double()
    torch.testing.assert_close(program.module()(x), expected.to(dtype).float())


def test_module_move_to_another_device_is_left_to_torch():
    module = CastingRouter(torch.float32)
    with tracing_branches(module):
        moved = module.to("meta")
    assert moved.classifier.weight.device.type == "meta"
