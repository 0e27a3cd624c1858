"""XLNet: configurations whose padded batches transformers itself cannot run."""

from __future__ import annotations

import torch


def refuse_one_way_padding(module: torch.nn.Module) -> None:
    """``XLNetModel`` with ``attn_type="uni"``: HF adds the padding mask ``[q, k, batch]`` into
    the one-way mask ``[q, k, 1, 1]`` in place (``attn_mask += data_mask[..., None]``), which
    fails for any batch over one, so a padded batch has no PyTorch reference to match."""
    from mobius.errors import ConfigError

    if module.attn_type == "uni":
        raise ConfigError(
            "xlnet: attn_type 'uni' cannot take an attention_mask for a batch over 1 in "
            "transformers (its in-place `attn_mask += data_mask` does not broadcast), so padded "
            "batches have no reference; attn_type 'bi' converts"
        )
