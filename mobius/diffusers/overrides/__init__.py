"""Replacements for diffusers methods that torch.export cannot trace with dynamic sizes, or
traces wrongly: one entry per class, one module per family, each saying why.

Installed on the instance when a component is built (``mobius.diffusers.trace.instantiate``),
never on the class; the computation is the model's own for every input.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mobius.diffusers.overrides import chroma, cosmos, joyimage, mochi
from mobius.synth.overrides import install_overrides

_M = "diffusers.models"
OVERRIDES: dict[str, Callable[[torch.nn.Module], None]] = {
    f"{_M}.transformers.transformer_chroma.ChromaCombinedTimestepTextProjEmbeddings": (
        chroma.guidance_zeros_by_shape
    ),
    f"{_M}.transformers.transformer_cosmos.CosmosLearnablePositionalEmbed": (
        cosmos.norm_scale_from_width
    ),
    f"{_M}.transformers.transformer_cosmos.CosmosRotaryPosEmbed": (
        cosmos.rotary_positions_by_arange
    ),
    f"{_M}.transformers.transformer_joyimage.JoyImageEditTransformer3DModel": (
        joyimage.symbolic_rotary_positions
    ),
    f"{_M}.attention_processor.MochiAttention": mochi.masked_joint_attention,
    f"{_M}.transformers.transformer_mochi.MochiRoPE": mochi.centers_by_arange,
}


def install(model: torch.nn.Module) -> None:
    """Install every entry that names the class of one of ``model``'s modules."""
    install_overrides(model, OVERRIDES)
