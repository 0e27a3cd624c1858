"""Classes whose forward takes Python lists of per-sample tensors (the batch is a list's length).

The contract: a pipeline that feeds a batch of equal-size samples passes one stacked tensor per
list argument, ``[batch, ...]`` with a dynamic batch, under the argument's own name; a list the
model gives back (one tensor per sample) is one stacked output. The graph comes from a
per-family override that replaces the loop over the list by batched tensor operations and sets
``takes_stacked_lists`` on the model (``overrides/z_image.py``); the model as diffusers builds it
is called on the lists (``list(t.unbind(0))``), as its pipelines call it, so the sweep compares
the graph with PyTorch's original list form.

Shapes (``ARGUMENT_RULES``, joined to ``argument_rules.RULES``):

- Z-Image: ``x`` ``[batch, in_channels, 1, height, width]`` (its pipelines add a frame axis of
  1 to image latents), ``cap_feats`` ``[batch, sequence_length, cap_feat_dim]``, ``t`` float32
  ``[batch]`` (a fraction in [0, 1]: the model scales it by ``t_scale``); out ``out_sample``
  ``[batch, in_channels, 1, height, width]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mobius.diffusers.tasks import HEIGHT, WIDTH
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

FLOAT = None  # the model's dtype
STACKED = "takes_stacked_lists"  # set on a model whose override takes the stacked tensors

# the list arguments of each class
LISTS: dict[str, tuple[str, ...]] = {
    "ZImageTransformer2DModel": ("x", "cap_feats"),
}


def _z_image_latents(name: str, channels_key: str) -> Callable[[Any], TensorSpec]:
    return lambda cfg: TensorSpec(
        name, FLOAT, (BATCH, cfg.get(channels_key) or 16, 1, HEIGHT, WIDTH)
    )


ARGUMENT_RULES: dict[tuple[str, str], Callable[[Any], TensorSpec]] = {
    ("ZImageTransformer2DModel", "x"): _z_image_latents("x", "in_channels"),
    ("ZImageTransformer2DModel", "cap_feats"): lambda cfg: TensorSpec(
        "cap_feats", FLOAT, (BATCH, SEQUENCE, cfg.get("cap_feat_dim") or 2560)),
    ("ZImageTransformer2DModel", "t"): lambda _cfg: TensorSpec("t", torch.float32, (BATCH,)),
}  # fmt: skip


def per_sample(cls: type, model: torch.nn.Module, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with each list argument of ``cls`` as the list of its rows, unless ``model``
    takes the stacked tensors (its override installed)."""
    names = LISTS.get(cls.__name__, ())
    if not names or getattr(model, STACKED, False):
        return kwargs
    return {k: list(v.unbind(0)) if k in names else v for k, v in kwargs.items()}


def stacked(cls: type, output: Any) -> Any:
    """``output`` with a per-sample list field stacked on a new batch axis (a list class's)."""
    if cls.__name__ not in LISTS or not hasattr(output, "keys"):
        return output
    for key, value in output.items():
        if isinstance(value, list) and value and isinstance(value[0], torch.Tensor):
            output[key] = torch.stack(value)
    return output
