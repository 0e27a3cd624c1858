"""The vision graph's inputs beyond ``pixel_values``: the required arguments of the family's own
``get_image_features``, under their HF names, found from its signature.

A family's vision tower may need more than the images: the Q-Former's instruction
(``qformer_input_ids``, InstructBLIP), a second, high-resolution view of the image
(``high_res_pixel_values``, DeepSeek-VL hybrid), each image's size in patches (``spatial_shapes``,
``target_sizes``) or pixels (``image_sizes``). What each argument is follows from its name, not
from the family: the table below says, per HF argument name, its dtype and axes. A name that is
not in it stops the conversion with the name, so a new family shows what is missing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from mobius import failures
from mobius.errors import UnsupportedError
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, TensorSpec
from mobius.tasks.head import VLM_MAPPING, auto_mapping
from mobius.tasks.image_shape import IMAGES, image_shape
from mobius.tasks.vlm_prepend import prepended_features_method

PATCHES = "num_patches"
QFORMER_SEQUENCE = "qformer_sequence_length"
HEIGHT, WIDTH = "image_height", "image_width"
PACKED_WIDTH = "packed_patches_width"
TILES = "num_tiles"
FRAMES = "num_frames"
# where a model makes the features it scatters into its placeholder tokens, in order of preference
FEATURE_METHODS = ("get_image_features", "get_video_features")


def required_arguments(method: Any) -> list[str]:
    """The parameters of ``method`` that have no default (``self`` and ``**kwargs`` left out)."""
    return [
        name
        for name, p in inspect.signature(method).parameters.items()
        if name != "self"
        and p.default is inspect.Parameter.empty
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def _pixels(name: str, config: ArchitectureConfig) -> TensorSpec:
    """``<view>pixel_values``: images at the size of ``<view>vision_config`` (``pixel_values``:
    ``vision_config``; ``high_res_pixel_values``: ``high_res_vision_config``); for a model that
    takes videos only (``takes_videos``), clips of frames ``[num_images, num_frames, ...]``."""
    prefix = name.removesuffix("pixel_values")
    vision = getattr(config.hf_config, f"{prefix}vision_config", None)
    frames = (FRAMES,) if takes_videos(image_features_method(config)) else ()
    return TensorSpec(name, None, (IMAGES, *frames, *image_shape(vision)))


def _per_image_pair(dtype: torch.dtype) -> Callable[[str, ArchitectureConfig], TensorSpec]:
    """An image's (height, width), in pixels or patches."""
    return lambda name, config: TensorSpec(name, dtype, (IMAGES, 2))


def _flattened_patches(name: str, config: ArchitectureConfig) -> TensorSpec:
    """Pix2Struct-style patches, padded per image: (row, column, the patch's pixels) each."""
    return TensorSpec(
        name, None, (IMAGES, PATCHES, 2 + config.hf_config.vision_config.patch_embed_hidden_size)
    )


def _qformer_ids(name: str, config: ArchitectureConfig) -> TensorSpec:
    """The instruction the Q-Former reads beside its queries (one row per image)."""
    return TensorSpec(name, torch.int64, (IMAGES, QFORMER_SEQUENCE))


EXTRA_INPUTS: dict[str, Callable[[str, ArchitectureConfig], TensorSpec]] = {
    "pixel_values": _pixels,
    "high_res_pixel_values": _pixels,
    "image_sizes": _per_image_pair(torch.int64),
    "spatial_shapes": _per_image_pair(torch.int64),
    "target_sizes": _per_image_pair(torch.int32),
    "flattened_patches": _flattened_patches,
    "qformer_input_ids": _qformer_ids,
}


def extra_vision_inputs(config: ArchitectureConfig, method: Any) -> list[TensorSpec]:
    """One input per required argument of ``get_image_features`` (``method``), by its name."""
    from mobius.errors import UnsupportedError
    from mobius.tasks.phi4_multimodal import IMAGE_INPUTS

    specs = []
    for name in required_arguments(method):
        make = EXTRA_INPUTS.get(name) or IMAGE_INPUTS.get(name)
        if make is None:
            raise UnsupportedError(
                f"{config.hf_config.model_type}: get_image_features takes {name!r}, which the "
                "vision graph has no input for (mobius/tasks/vlm_inputs.py)"
            )
        specs.append(make(name, config))
    return specs


def sized_by_pixels(hf: Any, method: Any) -> bool:
    """``get_image_features`` takes ``image_sizes`` and the images are not tiled (no anyres
    ``image_grid_pinpoints``): Pixtral's towers, whose images are the processor's batch padded
    to the largest, each cropped to its ``image_sizes`` (``synth/overrides/pixtral.py``)."""
    required = required_arguments(method)
    plain = "pixel_values" in required  # not Phi-4-multimodal's crops (image_pixel_values)
    return plain and "image_sizes" in required and not getattr(hf, "image_grid_pinpoints", None)


def padded_images_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """The processor's batch: ``pixel_values`` ``[num_images, channels, image_height,
    image_width]`` padded to the largest image, both sides multiples of the patches the projector
    merges, and each image's own ``image_sizes`` ``[num_images, 2]`` in pixels."""
    hf = config.hf_config
    channels = image_shape(hf.vision_config)[0]
    unit = hf.vision_config.patch_size * getattr(hf, "spatial_merge_size", 1)
    return [
        TensorSpec("pixel_values", None, (IMAGES, channels, HEIGHT, WIDTH), unit),
        TensorSpec("image_sizes", torch.int64, (IMAGES, 2)),
    ]


def example_side(dim: str, spec: TensorSpec, config: ArchitectureConfig) -> int:
    """Distinct example sides within the tower's position table: the full ``image_size``
    high and one merged patch less wide."""
    size = image_shape(config.hf_config.vision_config)[1]
    return size if dim == HEIGHT else max(size - spec.multiple_of, spec.multiple_of)


def packed_patches(method: Any) -> bool:
    """``get_image_features`` takes ``target_sizes``: NaViT-style packing (MiniCPM-V 4.6/4.7,
    MiniCPM-OCR), every image's patches side by side in one row of patches."""
    return "target_sizes" in required_arguments(method)


def _patches_per_feature(hf: Any) -> int:
    """Patches behind one image feature: the tower's window merge (``window_kernel_size``), then
    the projector's ``merge_kernel_size`` blocks, ``merger_times`` times."""
    window = getattr(hf.vision_config, "window_kernel_size", None) or (1, 1)
    merge = getattr(hf, "merge_kernel_size", None) or (1, 1)
    return window[0] * window[1] * (merge[0] * merge[1]) ** getattr(hf, "merger_times", 1)


def packed_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """The processor's packed layout: ``pixel_values`` ``[1, channels, patch, patches * patch]``
    (each image's patches row-major, images one after another) and each image's size in patches,
    ``target_sizes`` int32 ``[num_images, 2]``."""
    hf = config.hf_config
    channels, patch = image_shape(hf.vision_config)[0], hf.vision_config.patch_size
    return [
        TensorSpec(
            "pixel_values",
            None,
            (1, channels, patch, PACKED_WIDTH),
            patch * _patches_per_feature(hf),
        ),
        TensorSpec("target_sizes", torch.int32, (IMAGES, 2)),
    ]


def packed_patch_count(hf: Any, pixel_values: torch.Tensor) -> Any:
    """How many patches a packed ``pixel_values`` holds (as its patch convolution counts them)."""
    patch = hf.vision_config.patch_size
    return (pixel_values.shape[-1] - patch) // patch + 1


def anyres(hf: Any, method: Any) -> bool:
    """``image_sizes`` choose a tiling (``image_grid_pinpoints``: LLaVA-NeXT, OneVision)."""
    return "image_sizes" in required_arguments(method) and bool(
        getattr(hf, "image_grid_pinpoints", None)
    )


def fixed_anyres(hf: Any, method: Any) -> bool:
    """An anyres tower whose tiling also depends on how many images each prompt has
    (``batch_num_images``: LLaVA-OneVision tiles a prompt's only image, and shrinks large grids
    by bilinear interpolation): its graph takes one image at a fixed resolution. Other anyres
    towers take any images (``tiled_inputs``, ``synth/overrides/llava_next.py``)."""
    return anyres(hf, method) and "batch_num_images" in inspect.signature(method).parameters


def tiled_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """The processor's anyres batch: per image, the whole image resized to one tile and then its
    best resolution's tiles, padded to the batch's most, ``[num_images, num_tiles, channels,
    tile, tile]``; and each image's ``image_sizes`` ``[num_images, 2]`` in pixels."""
    channels, tile, _ = image_shape(config.hf_config.vision_config)
    return [
        TensorSpec("pixel_values", None, (IMAGES, TILES, channels, tile, tile)),
        TensorSpec("image_sizes", torch.int64, (IMAGES, 2)),
    ]


def fixed_resolution(hf: Any) -> tuple[int, int]:
    """The one image size an anyres vision graph takes: the first tiling
    (``image_grid_pinpoints[0]``), which an image of exactly that size is tiled to whole."""
    height, width = hf.image_grid_pinpoints[0]
    return int(height), int(width)


def fixed_resolution_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """One image at the fixed resolution, as the processor makes it: the whole image resized to
    one tile, then the tiles, ``[1, 1 + rows * columns, channels, tile, tile]``; and its
    ``image_sizes`` ``[1, 2]`` (checked to be the fixed resolution when the graph runs)."""
    hf = config.hf_config
    channels, tile, _ = image_shape(hf.vision_config)
    height, width = fixed_resolution(hf)
    tiles = 1 + (height // tile) * (width // tile)
    return [
        TensorSpec("pixel_values", None, (1, tiles, channels, tile, tile)),
        TensorSpec("image_sizes", torch.int64, (1, 2)),
    ]


def at_fixed_resolution(hf: Any, inputs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The inputs with ``image_sizes`` as the fixed resolution's Python sizes: the tiling and
    unpadding are then fixed."""
    return {**inputs, "image_sizes": [fixed_resolution(hf)]}


def checked_size(hf: Any, features: torch.Tensor, given: torch.Tensor) -> torch.Tensor:
    """``features`` plus a zero gathered out of a one-element table's range (ONNX ``Gather``
    fails) when the given ``image_sizes`` are not the fixed resolution."""
    height, width = fixed_resolution(hf)
    other = ((given[:, 0] != height) | (given[:, 1] != width)).any().to(torch.int64)
    table = features.new_zeros(1)
    return features + table[(2 * other).view(1)].sum()


def images_per_call(hf: Any, method: Any) -> dict[str, Any]:
    """What ``mobius.json`` says of a vision graph that takes one image per call: its
    ``vision_images_per_call`` (1), and the ``vision_image_size`` it takes (``fixed_anyres``)."""
    if fixed_anyres(hf, method):
        return {"vision_images_per_call": 1, "vision_image_size": list(fixed_resolution(hf))}
    return {}


def images_per_call_fallbacks(hf: Any, method: Any) -> list[Any]:
    """The fixed-resolution contract of an anyres tower, as a fallback (mobius.json, explain)."""
    from mobius.fallbacks import ANY_IMAGE_SIZE, FIXED_IMAGE_SIZE, Fallback

    if not fixed_anyres(hf, method):
        return []
    height, width = fixed_resolution(hf)
    reason = (
        f"image_sizes choose the tiling and unpadding (image_grid_pinpoints), so the number of "
        f"image tokens depends on their values: the graph takes one {height}x{width} image "
        "(resize it to that size before the processor) and checks image_sizes"
    )
    return [Fallback(FIXED_IMAGE_SIZE, reason, (ANY_IMAGE_SIZE,))]


def image_feature_arguments(config: ArchitectureConfig) -> list[str]:
    """What the family's ``get_image_features`` takes (``pixel_values``, ``image_grid_thw``...)."""
    method = image_features_method(config)
    if method is None:
        return []
    return [p for p in inspect.signature(method).parameters if p not in ("self", "kwargs")]


def model_class(config: ArchitectureConfig) -> Any:
    """The image-text-to-text head class for the config; for a model listed only as a
    multimodal LM (Phi-4-multimodal, images and audio), that class."""
    heads = auto_mapping(VLM_MAPPING)
    if type(config.hf_config) not in heads:
        return auto_mapping("MODEL_FOR_MULTIMODAL_LM")[type(config.hf_config)]
    return heads[type(config.hf_config)]


def grid_merge_size(vision: Any) -> int:
    """The side of the patch blocks a grid tower merges (MuseGlimmer calls it ``merge_size``, and
    its frames per patch ``patch_temporal``; Kimi-K2.5 ``merge_kernel_size``, square)."""
    kernel = getattr(vision, "merge_kernel_size", None)
    if isinstance(kernel, (list, tuple)) and kernel:
        return int(kernel[0])
    return getattr(vision, "spatial_merge_size", None) or getattr(vision, "merge_size", None) or 1


def position_patch_inputs(vision: Any, channels: int) -> list[TensorSpec]:
    """Gemma 4: each image as a row of flattened patches (``model_patch_size`` where the patches
    are merged before embedding), with each patch's (x, y) in ``image_position_ids`` (-1, -1 for
    padding); the patch count is a multiple of the pooled kernel's."""
    side = getattr(vision, "model_patch_size", None) or vision.patch_size
    pooled = 1 if hasattr(vision, "model_patch_size") else vision.pooling_kernel_size**2
    return [
        TensorSpec("pixel_values", None, (IMAGES, PATCHES, channels * side * side), pooled),
        TensorSpec("image_position_ids", torch.int64, (IMAGES, PATCHES, 2), pooled),
    ]


def flat_patch_inputs(hf: Any) -> list[TensorSpec] | None:
    """No vision tower: the model embeds the processor's flattened patches itself (Fuyu's
    ``patch_size`` and ``num_channels`` on the top config, a linear patch embedding), so
    ``pixel_values`` is ``[num_images, num_patches, patch * patch * channels]``. None otherwise."""
    if getattr(hf, "vision_config", None) is not None or not getattr(hf, "patch_size", None):
        return None
    width = hf.patch_size * hf.patch_size * getattr(hf, "num_channels", 3)
    return [TensorSpec("pixel_values", None, (IMAGES, PATCHES, width))]


def patch_sequence_inputs(hf: Any, method: Any) -> list[TensorSpec] | None:
    """``get_image_features`` takes ``spatial_shapes`` and ``pixel_attention_mask`` (Siglip2's
    NaFlex layout, LFM2-VL): each image as a row of flattened patches padded to a common count,
    its grid of patches in ``spatial_shapes`` (the tower resizes its position table to it) and
    its real patches in ``pixel_attention_mask`` (int32, as the processor makes it). None
    otherwise."""
    if not {"spatial_shapes", "pixel_attention_mask"} <= set(required_arguments(method)):
        return None
    channels, patch = image_shape(hf.vision_config)[0], hf.vision_config.patch_size
    return [
        TensorSpec("pixel_values", None, (IMAGES, PATCHES, channels * patch * patch)),
        TensorSpec("spatial_shapes", torch.int64, (IMAGES, 2)),
        TensorSpec("pixel_attention_mask", torch.int32, (IMAGES, PATCHES)),
    ]


@functools.cache
def processor_rank(model_type: str, temporal: int | None) -> int:
    """The rank of the ``pixel_values`` a grid family's image processor makes: 2 (each patch
    flattened, the Qwen2-VL processors') or 4 (each patch a small image: PaddleOCR-VL's and
    Kimi-K2.5's). Asked of the processor itself, with its defaults, on one small image; where it
    cannot run here (a backend not installed), 2 where the tower stacks frames
    (``temporal_patch_size``), else 4."""
    import numpy as np
    import transformers
    from transformers.models.auto.image_processing_auto import IMAGE_PROCESSOR_MAPPING_NAMES

    names = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type) or {}
    for backend in ("pil", "torchvision"):
        cls = getattr(transformers, names.get(backend) or "", None)
        if cls is None:
            continue
        try:
            image = np.zeros((56, 84, 3), dtype=np.uint8)
            return cls()(images=[image], return_tensors="np")["pixel_values"].ndim
        except Exception as exc:  # noqa: BLE001 - a processor that cannot run here says nothing
            failures.raise_if_fatal(exc)
            continue
    return 2 if temporal else 4


def check_pooled_grid(hf: Any) -> None:
    """A config whose ``mm_tokens_per_image`` pools the tower's patch grid (Gemma 3, ShieldGemma
    2, T5Gemma 2's encoder config: ``tokens_per_side = sqrt(mm_tokens_per_image)``, an average
    pool of ``patches_per_side // tokens_per_side``) must have at least one patch per token: else
    HF's own vision path fails (a pooling kernel of 0), which is the config's fault, not the
    trace's (ConfigError)."""
    from mobius.errors import ConfigError

    tokens = getattr(hf, "mm_tokens_per_image", None)
    vision = getattr(hf, "vision_config", None)
    size, patch = getattr(vision, "image_size", None), getattr(vision, "patch_size", None)
    if not isinstance(tokens, int) or not isinstance(size, int) or not isinstance(patch, int):
        return
    patches, per_side = size // patch, int(tokens**0.5)
    if per_side and patches // per_side == 0:
        raise ConfigError(
            f"{hf.model_type}: mm_tokens_per_image={tokens} asks for {per_side} tokens per side "
            f"from a grid of {patches}x{patches} patches (vision image_size {size} / patch_size "
            f"{patch}): HF's own vision path cannot run at this config (its pooling kernel is 0); "
            f"set mm_tokens_per_image to at most {patches * patches}, or pass --task "
            "text-generation to convert the text decoder alone"
        )


def vision_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """``pixel_values`` in the layout the processor makes for the family (and its companions)."""
    hf = config.hf_config
    vision = getattr(hf, "vision_config", None)
    check_pooled_grid(hf)
    if vision is None and "vision_config" in vars(hf) and flat_patch_inputs(hf) is None:
        raise UnsupportedError(
            f"{hf.model_type}'s config sets no vision_config: the model has no vision tower, so "
            "it has no image-text-to-text graphs"
        )
    method = image_features_method(config)
    arguments = image_feature_arguments(config)
    channels, height, width = image_shape(vision)
    if "image_grid_thw" in arguments:
        # each image's patches, and its (t, h, w) grid of patches: flattened, or as small images
        # where the family's processor makes them so (PaddleOCR-VL, Kimi-K2.5)
        size = vision.patch_size
        temporal = getattr(vision, "temporal_patch_size", None) or getattr(
            vision, "patch_temporal", None
        )
        flat = (channels * (temporal or 1) * size * size,)
        pixels = flat if processor_rank(hf.model_type, temporal) == 2 else (channels, size, size)
        merge = grid_merge_size(vision)
        return [
            TensorSpec("pixel_values", None, (PATCHES, *pixels), merge * merge),
            TensorSpec("image_grid_thw", torch.int64, (IMAGES, 3)),
        ]
    if "image_position_ids" in arguments:
        return position_patch_inputs(vision, channels)
    if "pixel_attention_mask" in arguments and len(arguments) == 2:
        # Idefics-style: a batch of prompts' image lists (all-zero images pad the lists), and a
        # mask of each image's real pixels
        return [
            TensorSpec("pixel_values", None, (BATCH, IMAGES, channels, height, width)),
            TensorSpec("pixel_attention_mask", torch.bool, (BATCH, IMAGES, height, width)),
        ]
    if sized_by_pixels(hf, method):
        return padded_images_inputs(config)
    if fixed_anyres(hf, method):
        return fixed_resolution_inputs(config)
    if anyres(hf, method):
        return tiled_inputs(config)
    if packed_patches(method):
        return packed_inputs(config)
    if (flat := flat_patch_inputs(hf)) is not None:
        return flat
    if (sequence := patch_sequence_inputs(hf, method)) is not None:
        return sequence
    if arguments[:1] == ["pixel_values"] and set(required_arguments(method)) <= {"pixel_values"}:
        return [TensorSpec("pixel_values", None, (IMAGES, channels, height, width))]
    # more than the images (vlm_inputs): an input per required argument, by its HF name
    return extra_vision_inputs(config, method)


def features_method(owner: Any) -> Any:
    """``owner``'s features method (a class or a model): ``get_image_features``, or where it has
    none and takes videos only (InstructBLIP-Video), ``get_video_features``; for a model that
    puts its image before the text (GIT, ``vlm_prepend``), the projection it prepends; else None."""
    for name in FEATURE_METHODS:
        method = getattr(owner, name, None)
        if method is not None:
            return method
    if (own := own_image_features(owner)) is not None:
        return own
    return prepended_features_method(owner)


def own_image_features(owner: Any) -> Any:
    """The image features method mobius writes for a family whose model has none
    (``phi4_multimodal.OWN_IMAGE_FEATURES``, by the owner's config type): bound to ``owner``
    where it is a model."""
    from mobius.tasks.phi4_multimodal import OWN_IMAGE_FEATURES

    config_class = getattr(owner, "config_class", None)
    own = OWN_IMAGE_FEATURES.get(getattr(config_class, "model_type", None))
    if own is None or isinstance(owner, type):
        return own
    return own.__get__(owner)


def takes_videos(method: Any) -> bool:
    """The features method is ``get_video_features``: its ``pixel_values`` are clips of frames,
    and its placeholder is the video token."""
    return getattr(method, "__name__", None) == "get_video_features"


def video_token_id(hf: Any) -> int | None:
    """The placeholder token of a model that takes videos only (``takes_videos``), else None."""

    head = auto_mapping(VLM_MAPPING).get(type(hf), None)
    if head is None or not takes_videos(features_method(head)):
        return None
    value = getattr(hf, "video_token_id", None)
    return value if isinstance(value, int) else None


def image_features_method(config: ArchitectureConfig) -> Any:
    """``get_image_features`` of the ``...Model`` under the head where it has one (the head's
    may only pass ``*args`` on, or have none: DeepSeek-VL hybrid), else the head's (or None)."""

    head = model_class(config)
    inner = auto_mapping("MODEL").get(type(config.hf_config), None)
    # the head holds the base model as ``model`` (BLIP's holds another, under ``blip``)
    method = features_method(inner) if head.base_model_prefix == "model" else None
    return method if method is not None else features_method(head)


def image_token_id(hf: Any) -> int | None:
    """The placeholder token the processor repeats once per image feature (on the vision
    sub-config where the config names none: Phi-4-multimodal)."""
    for owner in (hf, getattr(hf, "vision_config", None)):
        for name in ("image_token_id", "image_token_index"):
            value = getattr(owner, name, None)
            if isinstance(value, int):
                return value
    return video_token_id(hf)  # a model that takes videos only: its video token
