"""Where a model's own position numbering starts, so that the contract's ``position_ids`` (real
tokens counted from 0, ``CONTRACTS.md``) mean the same thing for every model.

Most decoders index their position table (or rotary angles) with the ``position_ids`` they are
given, counted from 0; OPT, BioGPT and XGLM add their table's offset to the given ids themselves.
The RoBERTa family (roberta, camembert, xlm-roberta, xlm-roberta-xl, data2vec-text,
roberta-prelayernorm, xmod, and any model built the same way) numbers positions from
``padding_idx + 1``: without ``position_ids`` its embeddings derive them from ``input_ids``
(``create_position_ids_from_input_ids``: pads get ``padding_idx``, real tokens
``padding_idx + 1, padding_idx + 2, ...``), but given ``position_ids`` are used as raw table
rows. Those models get ``padding_idx + 1`` added to the contract's ids inside the graph.

The mechanism is recognised structurally (the model is on the meta device when traced): next to
the model's input embeddings (the module that holds them, or one beside it, as Kosmos-2's
``embed_positions``), a module that numbers positions with ``create_position_ids_from_input_ids``
from its ``padding_idx`` and takes ``position_ids`` in its ``forward``. Other towers of a composite
model (Evolla's protein encoder) number their own inputs and are not looked at.
"""

from __future__ import annotations

import inspect

import torch


def derives_offset_positions(module: torch.nn.Module) -> bool:
    """Whether ``module`` numbers positions from ``padding_idx + 1`` but reads given ids raw."""
    return (
        callable(getattr(type(module), "create_position_ids_from_input_ids", None))
        and isinstance(getattr(module, "padding_idx", None), int)
        and "position_ids" in inspect.signature(module.forward).parameters
    )


def _beside_input_embeddings(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The module holding ``model``'s input embeddings, and that module's children."""
    try:
        embeddings = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        return []
    for module in model.modules():
        if any(child is embeddings for child in module.children()):
            return [module, *module.children()]
    return []


def position_offset(model: torch.nn.Module) -> int:
    """What to add to the contract's 0-based ``position_ids`` before ``model`` reads them: the
    first real position of RoBERTa-style embeddings (``padding_idx + 1``), else 0."""
    offsets = {
        m.padding_idx + 1 for m in _beside_input_embeddings(model) if derives_offset_positions(m)
    }
    if len(offsets) > 1:
        raise ValueError(f"embeddings disagree on where positions start: {sorted(offsets)}")
    return offsets.pop() if offsets else 0


def model_positions(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> dict:
    """``inputs`` with the contract's ``position_ids`` moved to where ``model`` numbers them."""
    offset = position_offset(model)
    if not offset or "position_ids" not in inputs:
        return inputs
    return {**inputs, "position_ids": inputs["position_ids"] + offset}
