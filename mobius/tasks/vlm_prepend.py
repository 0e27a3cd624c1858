"""Models that place the image before the text rather than at placeholder tokens (GIT): the
features method the vision graph splits at, and the embedding graph's prepending step.

``GitForCausalLM`` has no ``get_image_features`` and no image token: ``GitModel.forward`` puts
the projected patch features (``P = (image_size / patch_size)² + 1`` rows per image) in front of
the word embeddings, repeating one image over the batch (``batch // images``). The three graphs
(docs/design/, "GIT fits the contract"): the vision graph gives the projected features;
the embedding graph gives per batch row its image's ``P`` rows followed by the raw word
embeddings; the decoder (``synth/overrides/git.py``) adds positions and the LayerNorm to the text
rows only, told apart by ``position_ids`` being as long as the text.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from mobius.tasks.head import VLM_MAPPING, auto_mapping

TEXT_SEQUENCE = "text_sequence_length"
MAX_IMAGES = 1 << 16  # images one embedding call may be given


def _git_image_features(self: Any, pixel_values: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """GIT's image rows ``[images, P, hidden]``: the tower's last states, projected (what
    ``GitModel.forward`` puts before the text)."""
    git = self.git
    return git.visual_projection(git.image_encoder(pixel_values).last_hidden_state)


# head class name -> its features method (installed nowhere: found by ``features_method``)
PREPENDING = {"GitForCausalLM": _git_image_features}


def prepended_features_method(owner: Any) -> Any:
    """The features method of a model (or class) that prepends its image, else None."""
    cls = owner if isinstance(owner, type) else type(owner)
    method = PREPENDING.get(cls.__name__)
    if method is None or isinstance(owner, type):
        return method
    return types.MethodType(method, owner)


def prepends_image(owner: Any) -> bool:
    """Whether the model (a model, a class, an HF config or mobius config) puts its image rows
    before the text."""
    from transformers import PretrainedConfig

    hf = getattr(owner, "hf_config", owner)
    if isinstance(hf, PretrainedConfig):
        owner = auto_mapping(VLM_MAPPING).get(type(hf), None)
        if owner is None:
            return False
    cls = owner if isinstance(owner, type) else type(owner)
    return cls.__name__ in PREPENDING


def image_rows(hf: Any) -> int:
    """Rows one image gives (GIT: its patches and the class token, per frame)."""
    vision = hf.vision_config
    side = vision.image_size // vision.patch_size
    return (side * side + 1) * (getattr(hf, "num_image_with_embedding", None) or 1)


def prepend_image_features(
    model: torch.nn.Module, input_ids: torch.Tensor, features: torch.Tensor
) -> torch.Tensor:
    """Per batch row, its image's rows (image ``row * images // batch``, as HF repeats one image
    over the batch; none when no features are given) followed by the raw word embeddings."""
    embeds = model.get_input_embeddings()(input_ids)
    rows = image_rows(model.config)
    batch, hidden = input_ids.shape[0], features.shape[-1]
    images = features.shape[0] // rows
    # each row's image rows: all of one image, or none when no image is given. ``rows`` times
    # (images > 0), written as a ceiling division (up to MAX_IMAGES images) so that the trace
    # puts no bound on the number of features (a min() or a slice would)
    length = rows * ((images + MAX_IMAGES - 1) // MAX_IMAGES)
    per_row = torch.arange(batch, device=input_ids.device) * images // batch
    index = per_row[:, None] * rows + torch.arange(length, device=input_ids.device)[None]
    picked = features.to(embeds.dtype).index_select(0, index.reshape(-1))
    picked = picked.reshape(batch, length, hidden)
    return torch.cat([picked, embeds], 1)


def placement_manifest(hf: Any) -> dict[str, Any]:
    """What ``mobius.json`` says of a model that prepends its image (no ``image_token_id``): the
    embedding graph puts ``image_rows_per_image`` rows before each prompt's text, and the
    decoder's ``position_ids`` cover the text rows only (``[batch, text_sequence_length]``)."""
    if not prepends_image(hf):
        return {}
    return {"image_placement": "before-text", "image_rows_per_image": image_rows(hf)}
