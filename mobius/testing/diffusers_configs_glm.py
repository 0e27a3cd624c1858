"""Small configs for RFD4's Proteina transformer and autoencoder (conditioning a dict of the
preprocessor's tensors, each configured feature's keys inputs) and Ideogram 4's prompt-enhancer
head (an LM head over text-encoder states, under the generic contract).
GLM-Image's transformer is in ``diffusers_configs_shaped.py``."""

from __future__ import annotations

from typing import Any

# fmt: off
GLM_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    # the released feature lists (chirality is no input: protein_args.py); 2 trunk layers, a
    # pair update after the first; 2 heads of 8
    ("RFD4ProteinaTransformer", "RFD4ProteinaTransformer",
     {"nlayers": 2, "token_dim": 16, "nheads": 2, "dim_cond": 8, "pair_repr_dim": 8,
      "latent_dim": 4, "token_type_emb_dim": 4, "cath_emb_dim": 4, "t_emb_dim": 8,
      "seq_sep_dim": 6, "xt_pair_dist_dim": 5, "tri_mult_c": 8, "num_sequence_classes": 12}),
    ("Ideogram4PromptEnhancerHead", "Ideogram4PromptEnhancerHead",
     {"hidden_size": 16, "vocab_size": 40}),
]
# fmt: on
