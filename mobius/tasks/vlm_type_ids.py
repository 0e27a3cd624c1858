"""Which tokens are an image's, as the text model reads them: image-text models that attend both
ways within an image's tokens, or send them to their own experts, take the graph's
``token_type_ids`` under their own name."""

from __future__ import annotations

import inspect
from typing import Any

import torch

# Ernie 4.5 VL's: not 0 at image tokens and their start and end tokens (its processor's), which
# its MoE layers send to their vision experts; its attention is causal throughout
EXPERT_TYPE_IDS = "moe_mm_token_type_ids"


def type_ids_argument(model: torch.nn.Module | type, hf: Any = None) -> str | None:
    """Where the model reads which tokens are an image's: to attend both ways within them (Gemma 3
    and PaliGemma's ``token_type_ids``; Gemma 4's ``mm_token_type_ids`` where its text config
    says ``use_bidirectional_attention="vision"``), or to route them to its vision experts
    (``EXPERT_TYPE_IDS``). The graph's input is ``token_type_ids``."""
    params = inspect.signature(model.forward).parameters
    if "token_type_ids" in params:
        return "token_type_ids"
    if EXPERT_TYPE_IDS in params:
        return EXPERT_TYPE_IDS
    hf = hf if hf is not None or isinstance(model, type) else model.config
    both_ways = (
        getattr(hf.get_text_config(decoder=True), "use_bidirectional_attention", None)
        if hf
        else None
    )
    return "mm_token_type_ids" if "mm_token_type_ids" in params and both_ways == "vision" else None


def takes_token_type_ids(model: torch.nn.Module | type, hf: Any = None) -> bool:
    """Whether the model reads which tokens are an image's (``type_ids_argument``)."""
    return type_ids_argument(model, hf) is not None


def attends_both_ways(model: torch.nn.Module | type, hf: Any = None) -> bool:
    """Whether the model attends bidirectionally within an image's tokens (``type_ids_argument``,
    all but the expert routing)."""
    return type_ids_argument(model, hf) not in (None, EXPERT_TYPE_IDS)


def own_type_ids(model: torch.nn.Module, inputs: dict[str, Any]) -> dict[str, Any]:
    """The graph's ``token_type_ids`` under the name the model reads them by."""
    name = type_ids_argument(model)
    if "token_type_ids" not in inputs or name in (None, "token_type_ids"):
        return inputs
    inputs = dict(inputs)
    inputs[name] = inputs.pop("token_type_ids")
    return inputs
