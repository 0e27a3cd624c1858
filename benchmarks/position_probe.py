"""How each causal-LM type's HF forward treats ``position_ids`` (docs/design/, 'Position ids').

For every type in ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (or the ones named), on the sweep's tiny
randomised model: HF with the contract's ids (real tokens from 0) against HF without
``position_ids``, on an unpadded row and on a left-padded row whose pads hold the pad token. Prints
one line per type and, at the end, the types per class, with what ``mobius.tasks.positions``
detects next to the measured offset.

    python benchmarks/position_probe.py               # every type (~1 min)
    python benchmarks/position_probe.py roberta opt   # some
"""

from __future__ import annotations

import collections
import inspect
import sys

import torch

TOL = 1e-5


def _logits(out) -> torch.Tensor:
    return (out.logits if hasattr(out, "logits") else out[0]).float()


def classify(model: torch.nn.Module, config) -> dict:
    """The class of one model: no-argument, derives-with-offset (with the offset), as-given."""
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return {"class": "no position_ids argument"}
    text = config.get_text_config()
    pad = getattr(text, "pad_token_id", None)
    pad = pad if isinstance(pad, int) else 0
    ids = torch.randint(3, text.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))
    ids[ids == pad] = pad + 1
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :3], ids[0, :3] = 0, pad
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    real = mask[0].bool()

    def run(pos):
        return _logits(model(input_ids=ids, attention_mask=mask, position_ids=pos))

    derived, given = run(None), run(positions)
    result = {
        "unpadded": float((derived[1] - given[1]).abs().max()),
        "padded": float((derived[0][real] - given[0][real]).abs().max()),
    }
    if result["unpadded"] < TOL:
        pad_aware = result["padded"] < TOL
        result["class"] = "as given" + (" (derived ones pad-aware)" if pad_aware else "")
        return result
    for offset in range(1, 6):
        if float((derived[1] - run(positions + offset)[1]).abs().max()) < TOL:
            return {**result, "class": "derived with an offset", "offset": offset}
    return {**result, "class": "differs"}


def main(types: list[str]) -> None:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from mobius.tasks.positions import position_offset
    from mobius.testing.causal_lm import tiny_causal_lm

    torch.set_grad_enabled(False)
    classes = collections.defaultdict(list)
    for model_type in types or list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        try:
            model, config = tiny_causal_lm(model_type)
            result = classify(model, config)
            result["detected"] = position_offset(model)
        except Exception as exc:  # noqa: BLE001 - a survey: report and go on
            result = {"class": "error", "error": f"{type(exc).__name__}: {str(exc)[:120]}"}
        print(model_type, result, flush=True)
        classes[result["class"]].append(model_type)
        if result.get("detected", 0) != result.get("offset", 0):
            classes["DETECTION DISAGREES"].append(model_type)
    for name, members in classes.items():
        print(f"\n{name} ({len(members)}): {' '.join(members)}")


if __name__ == "__main__":
    main(sys.argv[1:])
