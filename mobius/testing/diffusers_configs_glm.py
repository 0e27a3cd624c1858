"""Small configs for RFD4's Proteina transformer and autoencoder (conditioning a dict of the
preprocessor's tensors, each configured feature's keys inputs) and Ideogram 4's prompt-enhancer
head (an LM head over text-encoder states, under the generic contract).
GLM-Image's transformer is in ``diffusers_configs_shaped.py``."""

from __future__ import annotations

from typing import Any

RESIDUE_TYPES = 6
# which residue types each of the 7 token types may decode to (each some), and which atom37
# slots each residue type has (the CA slot, 1, always)
ALLOWED = [[(t + r) % 3 != 0 for r in range(RESIDUE_TYPES)] for t in range(7)]
ATOM_SLOTS = [[a == 1 or (5 * r + a) % 4 != 0 for a in range(37)] for r in range(RESIDUE_TYPES)]

# fmt: off
GLM_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    # the released feature lists (chirality is no input: protein_args.py); 2 trunk layers, a
    # pair update after the first; 2 heads of 8
    ("RFD4ProteinaTransformer", "RFD4ProteinaTransformer",
     {"nlayers": 2, "token_dim": 16, "nheads": 2, "dim_cond": 8, "pair_repr_dim": 8,
      "latent_dim": 4, "token_type_emb_dim": 4, "cath_emb_dim": 4, "t_emb_dim": 8,
      "seq_sep_dim": 6, "xt_pair_dist_dim": 5, "tri_mult_c": 8, "num_sequence_classes": 12}),
    # the released feature lists; 1 trunk layer in each of encoder and decoder
    ("RFD4ProteinaAutoencoder", "RFD4ProteinaAutoencoder",
     {"atom37_mask": ATOM_SLOTS, "allowed_residue_types": ALLOWED, "latent_dim": 4,
      "n_residue_types": RESIDUE_TYPES, "nlayers": 1, "token_dim": 16, "nheads": 2,
      "dim_cond": 8, "pair_repr_dim": 8, "token_type_emb_dim": 4}),
    ("Ideogram4PromptEnhancerHead", "Ideogram4PromptEnhancerHead",
     {"hidden_size": 16, "vocab_size": 40}),
]
# fmt: on
