"""Parameters a model computes instead of saving: their values, made on CPU at trace time.

Marian lists its sinusoidal position tables in ``_keys_to_ignore_on_save``: checkpoints do not hold
them, and loading fills them through the model's ``_init_weights`` (``create_weight``). On the meta
device they have no value, so each such parameter's module is copied to CPU and initialised there.
"""

from __future__ import annotations

import copy

import torch


def computed_parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameter name -> value, for the parameters ``model`` leaves out of its checkpoints."""
    params = dict(model.named_parameters())
    values = {}
    for name in sorted(getattr(model, "_keys_to_ignore_on_save", None) or ()):
        if name not in params or "." not in name:
            continue
        owner_name, attribute = name.rsplit(".", 1)
        owner = copy.deepcopy(model.get_submodule(owner_name)).to_empty(device="cpu")
        with torch.no_grad():
            model._init_weights(owner)
        value = getattr(owner, attribute).detach().clone()
        values[name] = value
    return values
