"""Small configs for RFD4's Proteina transformer and autoencoder (conditioning a dict of the
preprocessor's tensors, each configured feature's keys inputs) and Ideogram 4's prompt-enhancer
head (an LM head over text-encoder states, under the generic contract).
GLM-Image's transformer is in ``diffusers_configs_shaped.py``."""

from __future__ import annotations

from typing import Any

# fmt: off
GLM_CONFIGS: list[tuple[str, str, dict[str, Any]]] = [
    ("Ideogram4PromptEnhancerHead", "Ideogram4PromptEnhancerHead",
     {"hidden_size": 16, "vocab_size": 40}),
]
# fmt: on
