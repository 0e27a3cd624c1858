"""Small configs for UniDiffuser's caption decoder (GPT-2 behind a prefix; its forward and its
caption step, ``mobius/diffusers/caption_decoder.py``) and Kandinsky 6 SR's latent upscaler bank
(one graph per scale it holds, ``upscaler_bank.py``).
"""

from __future__ import annotations

from typing import Any

# GPT-2 of two layers; the prefix encoded to prefix_hidden_dim (the pipeline's text latent) and
# decoded to n_embd, as UniDiffuser-v1 (64 -> 768 from CLIP's 768); 80 positions hold the prefix
# and the 67 tokens of its pipeline's longest caption
TEXT_DECODER = {
    "prefix_length": 4, "prefix_inner_dim": 12, "prefix_hidden_dim": 8, "vocab_size": 40,
    "n_positions": 80, "n_embd": 16, "n_layer": 2, "n_head": 2, "n_inner": 32,
}  # fmt: skip

# fmt: off
UNID_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("UniDiffuserTextDecoder", "UniDiffuserTextDecoder", TEXT_DECODER),
    # no prefix MLP: the prefix is n_embd wide and the forward returns the dataclass alone
    ("UniDiffuserTextDecoder (no prefix MLP)", "UniDiffuserTextDecoder",
     TEXT_DECODER | {"prefix_inner_dim": 16, "prefix_hidden_dim": None}),
    ("Kandinsky6SRLatentUpscalerBank", "Kandinsky6SRLatentUpscalerBank",
     {"in_channels": 4, "stage_channels": (16, 12, 8), "num_pre_blocks": 1, "num_mid_blocks": 1,
      "num_post_blocks": 1, "num_x2_adapter_blocks": 1, "scales": (2, 4)}),
]
# fmt: on
