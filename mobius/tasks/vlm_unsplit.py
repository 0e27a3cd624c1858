"""Why a model of the image-text-to-text mapping does not split into the three graphs
(CONTRACTS.md, "Vision–language models"): said when it converts as text generation, and when
``--task image-text-to-text`` is asked for. docs/design/, "VLMs outside
``get_image_features``"."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mobius.sources.config import ArchitectureConfig, from_hf
from mobius.sources.input_kinds import PROCESSOR_FILES
from mobius.tasks.head import VLM_MAPPING, auto_mapping

CONTRACT = "not the three-graph contract, whose decoder reads the image through inputs_embeds only"
IMAGE_TASK_HINT = "--task image-text-to-text converts the image path too"

log = logging.getLogger("mobius")


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
    from mobius.tasks.vlm_inputs import image_features_method, image_token_id

    hf = config.hf_config
    head = auto_mapping(VLM_MAPPING).get(type(hf), None)
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


def warn_text_only(hf_config: Any, directory: Path, task: str) -> None:
    """Say that a vision-language checkpoint converts without its image path (one line)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING

    if getattr(hf_config, "vision_config", None) is None:
        return
    if type(hf_config) not in MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING:
        return
    missing = not any((directory / name).is_file() for name in PROCESSOR_FILES)
    if task == "image-text-to-text":  # the three graphs, image path included
        if missing:
            log.warning(
                "%s: the checkpoint has no preprocessor_config.json or processor_config.json; "
                "the graphs are built, but images must be prepared as the family's processor does",
                hf_config.model_type,
            )
        return
    processor = (
        "; the checkpoint also has no preprocessor_config.json or processor_config.json, "
        "so images could not be prepared for it"
        if missing
        else ""
    )
    left_out = image_path_left_out(from_hf(hf_config), task)
    log.warning(
        "%s is a vision-language model: mobius converts its text path only (task %s, no "
        "image inputs%s)%s",
        hf_config.model_type,
        task,
        f"; {left_out}" if left_out else "",
        processor,
    )


def image_path_task(task: Any) -> str:
    """The task name the image-path checks above read: ``image-text-to-text`` for any task whose
    graphs include the vision encoder (a speech LLM that takes images too), else the task's own
    (a text-only build of either says it leaves the images out)."""
    graphs = getattr(task, "graphs", None) or []
    has_images = any(graph.name == "vision_encoder" for graph in graphs)
    return "image-text-to-text" if has_images else task.name
