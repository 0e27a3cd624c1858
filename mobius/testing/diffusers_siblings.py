"""A diffusers class that runs on a sibling component's modules (a Z-Image ControlNet on its
transformer), built for a test or the sweep as its pipeline holds it: the sibling built from its own
small config with random parameters and saved beside the model's directory."""

from __future__ import annotations

from pathlib import Path

import torch

from mobius.diffusers.shared_modules import SHARES
from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled
from mobius.testing.diffusers_configs_lists import SIBLINGS


def with_saved_sibling(model: torch.nn.Module, model_dir: Path) -> torch.nn.Module:
    """``model`` (saved in ``model_dir``) given the sibling it runs on, that sibling built with
    random parameters and saved beside ``model_dir`` as in a pipeline directory; ``model``
    itself where it runs on its own modules."""
    import diffusers

    name = type(model).__name__
    if name not in SIBLINGS:
        return model
    _, cls, kwargs = next(c for c in ALL_CONFIGS if c[0] == SIBLINGS[name])
    other = randomize_scaled(getattr(diffusers, cls)(**kwargs), 1).eval()
    other.save_pretrained(model_dir.parent / SHARES[name][0])
    return type(model).from_transformer(model, other)
