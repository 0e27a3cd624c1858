"""Small configs for the diffusers classes whose forward takes Python lists of per-sample tensors
(``mobius/diffusers/list_args.py``: converted with one stacked tensor per list), and for classes
whose small config needs several keys to agree.
"""

from __future__ import annotations

from typing import Any

# fmt: off
Z_IMAGE = {"in_channels": 4, "dim": 32, "n_layers": 1, "n_refiner_layers": 1, "n_heads": 2,
           "n_kv_heads": 2, "cap_feat_dim": 12, "axes_dims": [4, 6, 6],
           "axes_lens": [256, 64, 64]}

LIST_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("ZImageTransformer2DModel", "ZImageTransformer2DModel", Z_IMAGE),
]
# fmt: on
