"""GIT: text-only decoding keeps the padding mask as it is."""

from __future__ import annotations

import torch


def text_only_cache(module: torch.nn.Module) -> None:
    # Once its cache is non-empty, GitModel widens the padding mask by the image's patch tokens,
    # assuming the first call put an image into the cache. The converted graph takes no pixel
    # values, so its cache only ever holds text: the widened mask shifts every padding column by
    # the patch count, and the cached logits stop matching the full forward (0.67 in the sweep).
    # With no patch tokens to add, the cached call sees the mask the full forward sees.
    module.encoder.layer[0].attention.self.image_patch_tokens = 0
