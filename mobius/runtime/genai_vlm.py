"""``genai_config.json`` for the three graphs of an image-text-to-text package.

onnxruntime-genai 0.18 runs vision–language models only through its own per-family pipelines
(``phi3v``, ``phi4mm``, ``gemma3``, ``qwen2_5_vl``, ``qwen3_vl``, ``mistral3``, ``fara``), each
with its own image preprocessing. The config is written for those of our types genai knows by
the same name; for the others the reason is recorded in ``mobius.json`` (``genai``) and logged.
A text-only build (``--features text-only``) is a plain decoder genai runs as ``decoder``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import onnx_ir as ir

from mobius.runtime.genai import GENAI_CONFIG_FILE, GENERIC_TYPE, NotDrivable, genai_config

log = logging.getLogger("mobius")

# HF model type -> genai's pipeline type, where genai 0.18 has a pipeline for the family
VLM_TYPES = {"gemma3": "gemma3", "qwen2_5_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl"}


def _graph(model: ir.Model, filename: str) -> dict[str, Any]:
    return {
        "filename": filename,
        "inputs": {v.name: v.name for v in model.graph.inputs},
        "outputs": {v.name: v.name for v in model.graph.outputs},
    }


def genai_pipeline_missing(model_type: str) -> str | None:
    """Why onnxruntime-genai cannot run ``model_type``'s three graphs, or None where it has a
    pipeline for the family (said in ``mobius.json`` and by ``mobius explain``)."""
    if model_type in VLM_TYPES:
        return None
    return (
        f"onnxruntime-genai 0.18 has no vision-language pipeline for {model_type} "
        f"(it has: {', '.join(sorted(set(VLM_TYPES.values())))}, phi3v, phi4mm, mistral3, fara)"
    )


def vlm_genai_files(
    models: dict[str, ir.Model], hf_config: Any, checkpoint_dir: Path, image_token: int | None
) -> tuple[dict[str, str], str | None]:
    """(``{"genai_config.json": text}`` or nothing, why nothing was written)."""
    decoder = models.get("decoder_model")
    if decoder is None:
        return {}, "no decoder graph"
    try:
        config = genai_config(decoder, hf_config, checkpoint_dir, filename="decoder_model.onnx")
    except NotDrivable as reason:
        return {}, str(reason)
    if set(models) == {"decoder_model"}:  # text only
        config["model"]["type"] = GENERIC_TYPE
        return {GENAI_CONFIG_FILE: json.dumps(config, indent=2)}, None
    missing = genai_pipeline_missing(hf_config.model_type)
    if missing is not None:
        return {}, missing
    model = config["model"]
    family = VLM_TYPES[hf_config.model_type]
    model["type"] = family
    model["vision"] = _graph(models["vision_encoder"], "vision_encoder.onnx")
    model["embedding"] = _graph(models["embedding"], "embedding.onnx")
    if image_token is not None:
        model["image_token_id"] = image_token
    return {GENAI_CONFIG_FILE: json.dumps(config, indent=2)}, None
