"""Small configs for Cosmos 3's omni transformer (``Cosmos3OmniTransformer``): one vision item per
call, the packed layout derived as its pipeline derives it (``mobius/diffusers/cosmos3_args.py``,
``mobius/diffusers/overrides/cosmos3_omni.py``)."""

from __future__ import annotations

from typing import Any

# 2 query heads sharing 1 key/value head (grouped-query attention), heads of 12 (6 rotary
# frequencies, interleaved 2 + 2 + 2 over time, rows and columns), 3 latent channels in 2x2
# patches (patch_latent_dim 12), a vocabulary of 32
COSMOS3_OMNI = {
    "head_dim": 12, "hidden_size": 32, "intermediate_size": 48, "latent_channel": 3,
    "latent_patch_size": 2, "num_attention_heads": 2, "num_hidden_layers": 2,
    "num_key_value_heads": 1, "patch_latent_dim": 12, "vocab_size": 32,
    "rope_axes_dim": [2, 2, 2], "dtype": "float32",
}  # fmt: skip

COSMOS3_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("Cosmos3OmniTransformer", "Cosmos3OmniTransformer", COSMOS3_OMNI),
    # the Nemotron backbone (squared-ReLU MLPs, float32 RMS norms), no q/k norm on the prompt's
    # pathway but its keys normed for the generation pathway, integer positions (no fps
    # modulation), odd patches of 3, and the sound heads built (unused: no sound passed)
    (
        "Cosmos3OmniTransformer (Nemotron, keys normed for generation)",
        "Cosmos3OmniTransformer",
        COSMOS3_OMNI
        | {
            "hidden_act": "relu2",
            "qk_norm_for_text": False,
            "use_und_k_norm_for_gen": True,
            "enable_fps_modulation": False,
            "latent_patch_size": 3,
            "patch_latent_dim": 27,
            "sound_gen": True,
            "sound_dim": 4,
        },
    ),
]
