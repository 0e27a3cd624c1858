"""What ``mobius.json`` says of a VLM's multi-axis positions: the Qwen2-VL grid recipe's
``spatial_merge_size`` (with a ``position_recipe`` where a family departs from that grid:
``GRID_RECIPES``), or MiniCPM-V 4.7's canvas recipe (``runtime.canvas``), chosen by what the
family's ``get_rope_index`` reads: ``target_sizes`` (each crop's size in patches) and the image
markers of the config (``image_start_id``, ...) make the canvas."""

from __future__ import annotations

import inspect
import sys
from typing import Any

from mobius.tasks.head import VLM_MAPPING, auto_mapping
from mobius.tasks.vlm_inputs import image_token_id

MARKERS = ("image_start_id", "image_end_id", "slice_start_id", "slice_end_id", "newline_id")


def _rope_index_arguments(hf: Any) -> set[str]:

    cls = auto_mapping(VLM_MAPPING).get(type(hf), None)
    family = sys.modules.get(cls.__module__) if cls is not None else None
    for obj in vars(family).values() if family is not None else ():
        method = getattr(obj, "get_rope_index", None) if isinstance(obj, type) else None
        if method is not None:
            return set(inspect.signature(method).parameters)
    return set()


def canvas_recipe(hf: Any) -> bool:
    """``get_rope_index`` lays crops of ``target_sizes`` out on a canvas found by markers."""
    return "target_sizes" in _rope_index_arguments(hf) and hasattr(hf, MARKERS[0])


# families whose get_rope_index departs from Qwen2-VL's grid without a config field saying so
GRID_RECIPES = {
    # a newline feature ends each row of merged tokens: one more column (runtime.vlm)
    "hy_v4_vl": "grid-newline",
    # (column, row, image ordinal) on image tokens, text positions unshifted (runtime.image_index)
    "hunyuan_vl": "image-index",
}


def position_axes(hf: Any) -> int:
    """Rows of the decoder's multi-axis ``position_ids``: 3, or HunYuan-VL's one per
    ``mrope_section`` entry (3, or 4 with a sequence axis first)."""
    if GRID_RECIPES.get(getattr(hf, "model_type", None)) != "image-index":
        return 3
    rope = getattr(hf.get_text_config(decoder=True), "rope_parameters", None) or {}
    return len(rope.get("mrope_section") or ()) or 3


def position_manifest(hf: Any) -> dict[str, Any]:
    """The multi-axis recipe's settings for ``runtime.vlm`` (called for multi-axis models)."""
    if not canvas_recipe(hf):
        vision = getattr(hf, "vision_config", None)
        manifest = {"spatial_merge_size": getattr(vision, "spatial_merge_size", 1)}
        recipe = GRID_RECIPES.get(getattr(hf, "model_type", None))
        if recipe is not None:
            manifest["position_recipe"] = recipe
        if position_axes(hf) != 3:
            manifest["position_axes"] = position_axes(hf)
        return manifest
    merge = 2 if getattr(hf, "downsample_mode", "16x") == "4x" else 4  # patches per token side
    canvas = {
        "image_token_id": image_token_id(hf),
        "merge_factor": merge,
        "markers": {name: getattr(hf, name, None) for name in MARKERS},
    }
    return {"position_recipe": "canvas", "canvas": canvas}
