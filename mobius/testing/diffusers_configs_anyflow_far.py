"""Small configs for AnyFlow FAR's causal transformer (``mobius/diffusers/far_chunks.py``,
``mobius/diffusers/overrides/anyflow_far.py``)."""

from __future__ import annotations

from typing import Any

from mobius.testing.diffusers_configs_more import WAN

# four chunks of 1, 2, 2 and 1 frames with full_chunk_limit 2: the forward keeps the last two
# chunks at full resolution and compresses the first two (far_patch_embedding, the pooled
# rotary table), so the chunk-causal mask spans compressed and full chunks of unequal lengths;
# two blocks, so a mistake in one block's mask reaches the next
FAR = WAN | {
    "compressed_patch_size": (1, 4, 4), "full_chunk_limit": 2, "chunk_partition": (1, 2, 2, 1),
    "num_layers": 2,
}  # fmt: skip

FAR_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("AnyFlowFARTransformer3DModel", "AnyFlowFARTransformer3DModel", FAR),
]
