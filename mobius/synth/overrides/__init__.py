"""Replacements for HF methods that are wrong in the form mobius traces: one entry per class.

Each entry says why, in the module that holds it (one module per family). They install on the
instance (``make_traceable``), never on the class.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mobius.synth.overrides import (
    blt,
    canine,
    cpmant,
    deepseek_v4,
    funnel,
    git,
    led,
    longformer,
    prophetnet,
    qwen4_exp,
    reformer,
    rwkv,
)

OVERRIDES: dict[str, Callable[[torch.nn.Module], None]] = {
    "transformers.models.blt.modeling_blt.BltModel": blt.traceable,
    "transformers.models.canine.modeling_canine.CanineAttention": canine.dense_local_chunks,
    "transformers.models.canine.modeling_canine.CanineModel": canine.molecules_gathered,
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
    "transformers.models.longformer.modeling_longformer.LongformerModel": (
        longformer.no_window_padding
    ),
    "transformers.models.longformer.modeling_longformer.LongformerSelfAttention": (
        longformer.dense_window_and_global
    ),
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


def install_overrides(model: torch.nn.Module) -> None:
    """Install every entry that names the class of one of ``model``'s modules."""
    for module in model.modules():
        cls = type(module)
        found = OVERRIDES.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            found(module)
