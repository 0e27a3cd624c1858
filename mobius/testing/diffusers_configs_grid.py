"""Small configs for the diffusers classes whose latent grid or prompt length reaches forward as
Python ints (``mobius/diffusers/latent_grid.py``): the QwenImage family.
"""

from __future__ import annotations

from typing import Any

# patch tokens of 4 latent channels x 2 x 2; rotary pairs 2 + 3 + 3 of a head of 16
QWEN_IMAGE = {
    "patch_size": 2, "in_channels": 16, "out_channels": 4, "num_layers": 2,
    "attention_head_dim": 16, "num_attention_heads": 2, "joint_attention_dim": 12,
    "axes_dims_rope": (4, 6, 6),
}  # fmt: skip

# fmt: off
GRID_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("QwenImageTransformer2DModel", "QwenImageTransformer2DModel", QWEN_IMAGE),
    ("QwenImageControlNetModel", "QwenImageControlNetModel",
     QWEN_IMAGE | {"extra_condition_channels": 4}),
]
# fmt: on
