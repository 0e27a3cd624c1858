"""Feed-forward blocks: gated (``down(act(gate(x)) * up(x))``) and plain (``fc2(act(fc1(x)))``)."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import Linear, as_linear

FLOAT = ir.DataType.FLOAT

# HF ``hidden_act`` names -> the ONNX form emitted by ``activation``.
ACTIVATIONS = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_tanh": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_new": "gelu_tanh",
    "relu": "relu",
}


def check_activation(name: str) -> str:
    """The canonical activation name, or an error listing the supported ones."""
    if name not in ACTIVATIONS:
        raise ValueError(f"unsupported activation {name!r}; supported: {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def activation(op, name: str, x):
    """Apply an HF-named activation: silu is ``x * Sigmoid(x)``, gelu is ONNX ``Gelu`` (exact or tanh)."""
    kind = check_activation(name)
    if kind == "silu":
        return op.Mul(x, op.Sigmoid(x))
    if kind == "gelu":
        return op.Gelu(x)
    if kind == "gelu_tanh":
        return op.Gelu(x, approximate="tanh")
    return op.Relu(x)


class GatedMLP(nn.Module):
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` (Llama, Mistral, Qwen, Gemma).

    Each projection is given by sizes, an existing weight value (no bias) or a ``Linear``.
    """

    def __init__(
        self,
        hidden_size: int | None = None,
        intermediate_size: int | None = None,
        activation: str = "silu",
        bias: bool = False,
        *,
        gate_proj: ir.Value | Linear | None = None,
        up_proj: ir.Value | Linear | None = None,
        down_proj: ir.Value | Linear | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.activation = activation
        check_activation(activation)
        self.gate_proj = as_linear(gate_proj, hidden_size, intermediate_size, bias, dtype)
        self.up_proj = as_linear(up_proj, hidden_size, intermediate_size, bias, dtype)
        self.down_proj = as_linear(down_proj, intermediate_size, hidden_size, bias, dtype)

    def forward(self, op, x):
        gate = activation(op, self.activation, self.gate_proj(op, x))
        return self.down_proj(op, op.Mul(gate, self.up_proj(op, x)))


class MLP(nn.Module):
    """``fc2(act(fc1(x)))`` with biases (OPT, Phi, CLIP, ViT).

    ``names`` sets the HF attribute names of the two projections (``("fc1", "fc2")`` by default,
    e.g. ``("dense_h_to_4h", "dense_4h_to_h")`` for Falcon). Projections may be given as an existing
    weight value (no bias) or a ``Linear`` (``Linear(weight=w, bias=b)`` for both).
    """

    def __init__(
        self,
        hidden_size: int | None = None,
        intermediate_size: int | None = None,
        activation: str = "gelu",
        bias: bool = True,
        *,
        fc1: ir.Value | Linear | None = None,
        fc2: ir.Value | Linear | None = None,
        names: tuple[str, str] = ("fc1", "fc2"),
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.activation = activation
        check_activation(activation)
        self.names = names
        setattr(self, names[0], as_linear(fc1, hidden_size, intermediate_size, bias, dtype))
        setattr(self, names[1], as_linear(fc2, intermediate_size, hidden_size, bias, dtype))

    def forward(self, op, x):
        fc1, fc2 = (getattr(self, n) for n in self.names)
        return fc2(op, activation(op, self.activation, fc1(op, x)))
