"""Replacements for HF methods that are wrong in the form mobius traces: one entry per class.

Each entry says why, in the module that holds it (one module per family). They install on the
instance (``make_traceable``), never on the class.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mobius.synth.overrides import (
    blt,
    cpmant,
    deepseek_v4,
    funnel,
    git,
    led,
    prophetnet,
    qwen4_exp,
    reformer,
    rwkv,
)

OVERRIDES: dict[str, Callable[[torch.nn.Module], None]] = {
    "transformers.models.blt.modeling_blt.BltModel": blt.traceable,
    "transformers.models.cpmant.modeling_cpmant.CpmAntModel": cpmant.padding_by_arange,
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4HCACompressor": (
        deepseek_v4.hca_padded_windows
    ),
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4CSACompressor": (
        deepseek_v4.csa_padded_windows
    ),
    "transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4Indexer": (
        deepseek_v4.indexer_padded_windows
    ),
    "transformers.models.funnel.modeling_funnel.FunnelAttentionStructure": (
        funnel.symbolic_positions
    ),
    "transformers.models.git.modeling_git.GitModel": git.text_only_cache,
    "transformers.models.led.modeling_led.LEDEncoder": led.no_window_padding,
    "transformers.models.led.modeling_led.LEDEncoderSelfAttention": led.banded_attention,
    "transformers.models.prophetnet.modeling_prophetnet.ProphetNetPositionalEmbeddings": (
        prophetnet.positions_from_cache
    ),
    "transformers.models.qwen4_exp.modeling_qwen4_exp.Qwen4ExpTextQSAIndexer": (
        qwen4_exp.batched_selection
    ),
    "transformers.models.reformer.modeling_reformer.AxialPositionEmbeddings": (
        reformer.axial_positions_gathered
    ),
    "transformers.models.rwkv.modeling_rwkv.RwkvSelfAttention": rwkv.attention_mix,
    "transformers.models.rwkv.modeling_rwkv.RwkvFeedForward": rwkv.feed_forward_mix,
    "transformers.models.rwkv.modeling_rwkv.RwkvModel": rwkv.rescaled_at_use,
}


def install_overrides(
    model: torch.nn.Module, table: dict[str, Callable[[torch.nn.Module], None]] | None = None
) -> None:
    """Install every entry of ``table`` (default: the transformers table) that names the class
    of one of ``model``'s modules."""
    table = OVERRIDES if table is None else table
    for module in model.modules():
        cls = type(module)
        found = table.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            found(module)
