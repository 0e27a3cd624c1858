"""Why a model of the image-text-to-text mapping does not split into the three graphs
(CONTRACTS.md, "Vision–language models"): said when it converts as text generation, and when
``--task image-text-to-text`` is asked for. docs/design-notes.md, "VLMs outside
``get_image_features``"."""

from __future__ import annotations

from typing import Any

from mobius.config import ArchitectureConfig

CONTRACT = "not the three-graph contract, whose decoder reads the image through inputs_embeds only"
IMAGE_TASK_HINT = "--task image-text-to-text converts the image path too"


def image_path_left_out(config: ArchitectureConfig, task: str) -> str | None:
    """Why converting ``config`` as ``task`` leaves out an image path: the reason the model has no
    three-graph form (``why_not_split``), or, where it has one, the task that converts it. None
    for ``image-text-to-text`` itself and for models outside the image-text-to-text mapping. The
    text-only warning and ``mobius explain`` (an ``image`` gap) both say it."""
    from mobius.tasks import TASKS

    if task == "image-text-to-text":
        return None
    reason = why_not_split(config)
    if reason is None and TASKS["image-text-to-text"].supports(config):
        return IMAGE_TASK_HINT
    return reason


def why_not_split(config: ArchitectureConfig) -> str | None:
    """One clause saying why ``config``'s image path has no three-graph form, or None where the
    model splits (or is not in the image-text-to-text mapping)."""
    from mobius.tasks.head import auto_mapping
    from mobius.tasks.vlm import image_token_id
    from mobius.tasks.vlm_inputs import MAPPING, image_features_method

    hf = config.hf_config
    head = auto_mapping(MAPPING).get(type(hf), None)
    if head is None or image_features_method(config) is not None:
        return None
    if not any(isinstance(v, dict) for k, v in hf.to_dict().items() if k.endswith("config")):
        return f"{hf.model_type} is a text-only model ({head.__name__}): it has no image path"
    if not head.can_generate():
        return f"{hf.model_type} ({head.__name__}) does not generate text (PI0 predicts actions)"
    if _cross_attends(hf):
        return (
            f"{hf.model_type}'s text decoder cross-attends to the image's states in its own "
            f"layers: {CONTRACT}"
        )
    if image_token_id(hf) is None:
        return (
            f"{hf.model_type} has no features method and no image placeholder token: it places "
            "the image itself; mobius's embedding graph places features at placeholder tokens, "
            "or before the text for the models tasks/vlm_prepend.py knows (GIT)"
        )
    return f"{hf.model_type} has no get_image_features or get_video_features to split at"


def _cross_attends(hf: Any) -> bool:
    """Mllama's text config lists ``cross_attention_layers``; Idefics interleaves a gated
    cross-attention block every ``cross_layer_interval`` layers."""
    text = hf.get_text_config(decoder=True)
    return bool(getattr(text, "cross_attention_layers", None)) or bool(
        getattr(hf, "cross_layer_interval", None)
    )
