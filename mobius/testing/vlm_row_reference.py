"""A generation reference row by row, for models whose cached steps misread the padding mask.

Unlimited-OCR's reference sliding-window layers (R-SWA) keep the prompt's keys for good beside a
window of decoded ones. Once the window is full, transformers builds each decode step's mask with
the window's offset added to every key index, the prompt's included, and looks the padding mask up
at those shifted indices: a left-padded row then attends to some of its pad slots' keys (measured
on the tiny model, window 4: the unpadded row matches the graph for all 12 steps to 5e-6, the
padded row leaves it at the step after the window fills, by 1.7). The reference is therefore HF's
``generate`` on each row alone, without its pads (same positions, so same logits where the padded
batch is right), and HF's batched ``generate`` is reported beside it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mobius.tasks.vlm_inputs import image_token_id


def misreads_padding_when_cached(model: Any) -> bool:
    """Whether the text model has reference sliding-window layers (see the module docstring)."""
    kinds = getattr(model.config.get_text_config(), "layer_types", None) or []
    return "reference_sliding_attention" in kinds


def rows_alone(
    model: Any, inputs: dict, new_tokens: int, generate: Any
) -> tuple[np.ndarray, np.ndarray]:
    """``generate``'s (tokens, logits) for each row of ``inputs`` run alone without its pads;
    image inputs go to the rows holding image tokens (the prompt's first row)."""
    ids, mask = inputs["input_ids"], inputs["attention_mask"].bool()
    token = image_token_id(model.config)
    tokens, logits = [], []
    for row in range(ids.shape[0]):
        real = mask[row]
        alone = {
            "input_ids": ids[row : row + 1, real],
            "attention_mask": torch.ones_like(ids[row : row + 1, real]),
        }
        if (ids[row] == token).any():
            alone |= {k: v for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
        row_tokens, row_logits = generate(model, alone, new_tokens)
        tokens.append(row_tokens[0])
        logits.append(row_logits[0])
    return np.stack(tokens), np.stack(logits)


# what this module's reference is, as reference_agreement reports it
REFERENCE = (
    "HF generate on each row alone (its batched cached steps look the padding mask up at "
    "shifted indices)"
)


def reference_agreement(
    generated: tuple[np.ndarray, np.ndarray],
    reference: tuple[np.ndarray, np.ndarray],
    mask: Any,
    reference_is: str,
) -> str:
    """HF's batched ``generate`` (tokens, logits) against a reference generation, for the
    unpadded rows and the left-padded ones: whether the tokens are equal and the largest logit
    difference; ``reference_is`` says what the reference is."""
    (tokens, logits), (ref_tokens, ref_logits) = generated, reference
    padded = ~np.asarray(mask).astype(bool).all(-1)
    said = []
    for name, rows in (("unpadded", ~padded), ("left-padded", padded)):
        if rows.any():
            equal = "equal" if (tokens[rows] == ref_tokens[rows]).all() else "differ"
            worst = float(np.abs(logits[rows] - ref_logits[rows]).max())
            said.append(f"{name} rows: tokens {equal}, logits {worst:.1e} off")
    return f"generation reference: {reference_is}; HF's batched generate against it: " + "; ".join(
        said
    )
