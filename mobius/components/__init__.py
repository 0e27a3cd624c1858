"""Hand-authored onnxscript components (``onnxscript.nn.Module``) emitted for matched patterns:
attention and its masks, rotary embeddings, norms, MLPs, mixtures of experts, embeddings, linears.

Components import onnxscript and onnx_ir only: no torch, nothing else of mobius.
"""

from mobius.components.attention import Attention, CausalMask
from mobius.components.embedding import Embedding, LearnedPositions
from mobius.components.linear import Linear
from mobius.components.mlp import MLP, GatedMLP
from mobius.components.moe import Experts, MoE, SigmoidGroupRouter, SoftmaxTopKRouter
from mobius.components.norms import LayerNorm, RMSNorm
from mobius.components.rotary import (
    ApplyRotary,
    DynamicRotaryTable,
    RopeParameters,
    RotaryTable,
    rope_parameters,
)
from mobius.components.self_attention import SelfAttention

__all__ = [
    "MLP",
    "ApplyRotary",
    "Attention",
    "CausalMask",
    "DynamicRotaryTable",
    "Embedding",
    "Experts",
    "GatedMLP",
    "LayerNorm",
    "LearnedPositions",
    "Linear",
    "MoE",
    "RMSNorm",
    "RopeParameters",
    "RotaryTable",
    "SelfAttention",
    "SigmoidGroupRouter",
    "SoftmaxTopKRouter",
    "rope_parameters",
]
