"""One image's size as a vision sub-config gives it, and the axis that counts images: shared by
the vision graph's inputs (``vlm_inputs``) and the families that describe their own
(``phi4_multimodal``)."""

from __future__ import annotations

from typing import Any

IMAGES = "num_images"


def image_shape(vision: Any) -> tuple[int, int, int]:
    """(channels, height, width) of one image for a vision sub-config."""
    if vision is not None and getattr(vision, "image_size", None) is None:
        vision = _pixel_sub_config(vision)
    channels = getattr(vision, "num_channels", None) or getattr(vision, "in_channels", 3)
    size = getattr(vision, "image_size", None)  # None: any size (an axis the trace names)
    height, width = size if isinstance(size, (list, tuple)) else (size, size)
    return channels, height, width


def _pixel_sub_config(vision: Any) -> Any:
    """A vision config made of towers in sequence names its image size on the first tower's
    sub-config (Unlimited-OCR: SAM, then a CLIP encoder on SAM's features), the one that reads
    the pixels; ``vision`` itself where no sub-config names one."""
    for key in getattr(vision, "sub_configs", None) or {}:
        sub = getattr(vision, key, None)
        if getattr(sub, "image_size", None) is not None:
            return sub
    return vision
