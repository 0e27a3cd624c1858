"""Vision–language models (image-text-to-text): three graphs (CONTRACTS.md, "Vision–language
models").

The split follows the HF model's own modules, not the family:

- ``vision_encoder``: ``model.get_image_features`` (the vision tower and the projector), its
  output flattened to ``image_features`` ``[num_image_tokens, hidden]``.
- ``embedding``: ``model.get_input_embeddings()`` on ``input_ids``, then the image features
  scattered into the image-token positions in order (what the HF forward's ``masked_scatter``
  does).
- ``decoder_model``: the whole model called with ``inputs_embeds`` and no pixels (the language
  model and its head): a causal-LM graph, with the causal-LM task's cache handling.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import torch

from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, TOTAL, Task, TensorSpec
from mobius.tasks.causal_lm import CausalLMTask, cache_argument, returned_cache
from mobius.tasks.head import VLM_MAPPING, auto_mapping
from mobius.tasks.modality import Modality, scatter_features
from mobius.tasks.vlm_canvas import position_axes, position_manifest
from mobius.tasks.vlm_deepstack import FEATURES as DEEPSTACK_FEATURES
from mobius.tasks.vlm_deepstack import NAME as DEEPSTACK
from mobius.tasks.vlm_deepstack import (
    added_deepstack,
    deepstack_layers,
    placed_deepstack,
    stacked,
)
from mobius.tasks.vlm_inputs import (
    HEIGHT,
    IMAGES,
    PACKED_WIDTH,
    PATCHES,
    WIDTH,
    at_fixed_resolution,
    checked_size,
    example_side,
    features_method,
    fixed_anyres,
    image_features_method,
    image_token_id,
    images_per_call,
    images_per_call_fallbacks,
    model_class,
    packed_patch_count,
    vision_inputs,
)
from mobius.tasks.vlm_masks import _as_first_call, _model_positions, masks_without_vmap
from mobius.tasks.vlm_position_mask import NAME as POSITION_MASK
from mobius.tasks.vlm_position_mask import (
    decoder_reads_position_mask,
    mask_manifest,
    place_by_mask,
    places_by_position_mask,
    position_mask_spec,
)
from mobius.tasks.vlm_prepend import (
    TEXT_SEQUENCE,
    placement_manifest,
    prepend_image_features,
    prepends_image,
)
from mobius.tasks.vlm_type_ids import attends_both_ways, own_type_ids, takes_token_type_ids

IMAGE_TOKENS = "num_image_tokens"
# example sizes: distinct from the base task's (2, 7, 4, 11) so export never unifies two axes
_SIZES = {IMAGE_TOKENS: 6, IMAGES: 3, PATCHES: 16}
# the image side of the modality split (``modality.py``): what a model with audio too adds it as
IMAGE = Modality("image", "vision_encoder", "image_features", IMAGE_TOKENS, image_token_id)
TEXT_ONLY = "text-only"


def text_config(config: ArchitectureConfig) -> Any:
    return config.hf_config.get_text_config(decoder=True)


def multi_axis_positions(hf: Any) -> bool:
    """Qwen2-VL-style rotary: ``position_ids`` ``[3, batch, sequence]``. Said by the config
    (``mrope_section``) or by the family's model, which computes them (``get_rope_index``)."""
    rope = getattr(text_config_of(hf), "rope_parameters", None) or {}
    if isinstance(rope, dict) and "mrope_section" in rope:
        return True

    cls = auto_mapping(VLM_MAPPING).get(type(hf), None)
    if cls is None:
        return False
    family = sys.modules.get(cls.__module__)
    return any(
        isinstance(obj, type) and hasattr(obj, "get_rope_index") for obj in vars(family).values()
    )


def text_config_of(hf: Any) -> Any:
    return hf.get_text_config(decoder=True)


def _auto() -> Any:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    """The ``...Model`` under the head (where ``get_image_features`` lives), else the model."""
    inner = getattr(model, "model", None)
    return inner if hasattr(inner, "get_image_features") else model


def language_model(model: torch.nn.Module) -> torch.nn.Module:
    """What the decoder graph runs: the model, or where its forward cannot run without images
    (InstructBLIP's requires ``pixel_values``), its ``language_model`` (a causal LM with its head);
    a model placing features by ``image_embeds_position_mask`` (Kosmos-2, whose forward raises
    without the image or its embeddings), its ``text_model`` (``vlm_position_mask``)."""
    if places_by_position_mask(model) and hasattr(model, "text_model"):
        return model.text_model
    pixels = inspect.signature(model.forward).parameters.get("pixel_values")
    required = pixels is not None and pixels.default is inspect.Parameter.empty
    return model.language_model if required else model


class _VLMGraph(Task):
    """One graph of a VLM: built by ``AutoModelForImageTextToText``."""

    attention_implementations = ("sdpa", "eager")
    padding_mask_input = None
    mapping = VLM_MAPPING

    def __init__(self, parent: VisionLanguageTask) -> None:
        self.parent = parent

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return _auto()

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        sizes = {BATCH: 2, SEQUENCE: 7, **_SIZES}
        shape = [d if isinstance(d, int) else sizes.get(d, 5) for d in spec.dims]
        if PATCHES in spec.dims and shape[spec.dims.index(PATCHES)] % spec.multiple_of:
            # whole pooled blocks, at least two (a count of one would be specialised)
            unit = spec.multiple_of
            axis = spec.dims.index(PATCHES)
            shape[axis] = unit * max(2, -(-shape[axis] // unit))
        return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")


class VisionGraph(_VLMGraph):
    name = "vision_encoder"

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return vision_inputs(config)

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return ["image_features"] + ([DEEPSTACK_FEATURES] if deepstack_layers(config) else [])

    def fallbacks_taken(self, config: ArchitectureConfig) -> list[Any]:
        """A fixed anyres tower's graph takes one image size only (``vlm_inputs``)."""
        return images_per_call_fallbacks(config.hf_config, image_features_method(config))

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        if PACKED_WIDTH in spec.dims:  # three features' patches
            shape = [3 * spec.multiple_of if d == PACKED_WIDTH else d for d in spec.dims]
            return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")
        if HEIGHT not in spec.dims:
            return super().example_value(spec, config, dtype)
        sides = {d: example_side(d, spec, config) for d in (HEIGHT, WIDTH)}
        shape = [sides.get(d, _SIZES.get(d, d)) for d in spec.dims]
        return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        grid = contextlib.nullcontext()
        if "image_grid_thw" in inputs:
            from mobius.tasks.vlm_grid import symbolic_grid

            grid = symbolic_grid(model, inputs["pixel_values"].shape[0])
        elif "target_sizes" in inputs:  # packed patches (vlm_inputs.packed_inputs)
            from mobius.tasks.vlm_grid import symbolic_grid

            patches = packed_patch_count(model.config, inputs["pixel_values"])
            grid = symbolic_grid(model, patches)
        method, given = features_method(type(_inner(model))), None
        if fixed_anyres(model.config, method):
            given, inputs = inputs["image_sizes"], at_fixed_resolution(model.config, inputs)
        with grid:
            features, deepstack = vision_outputs(model, inputs)
        if given is not None:
            features = checked_size(model.config, features, given)
        return (features,) if deepstack is None else (features, deepstack)


def image_features(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """``get_image_features`` as ``[num_image_tokens, hidden]``: every image's features in order."""
    return vision_outputs(model, inputs)[0]


def vision_outputs(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The image features, and the deepstack features ``[layers, num_image_tokens, hidden]``
    where the tower makes them (``vlm_deepstack``)."""
    from mobius.tasks.vlm_grid import whole_sizes

    with _whole_when_iterated(), whole_sizes():
        out = features_method(_inner(model))(**inputs, return_dict=True)
    return _features(out), stacked(getattr(out, "deepstack_features", None))


def _features(out: Any) -> torch.Tensor:
    features = getattr(out, "pooler_output", None)
    if features is None:
        features = out if isinstance(out, (torch.Tensor, list, tuple)) else out[0]
    if isinstance(features, (list, tuple)):
        features = torch.cat([f.reshape(-1, f.shape[-1]) for f in features], dim=0)
    return features.reshape(-1, features.shape[-1])


@contextlib.contextmanager
def _whole_when_iterated() -> Iterator[None]:
    """While tracing, iterating a tensor whose first axis is dynamic yields the tensor itself.

    HF ends ``get_image_features`` with ``list(features)`` (one entry per image), which would fix
    the number of images in the trace; the caller flattens every entry to rows anyway, so the
    whole tensor as the only entry gives the same rows for any number of images. Iterating a
    concrete axis is left as it is.
    """
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    original_iter, original_len = torch.Tensor.__iter__, torch.Tensor.__len__

    def dynamic(tensor: torch.Tensor) -> bool:
        return tensor.dim() > 0 and not is_concrete_int(tensor.shape[0])

    def iterate(self: torch.Tensor) -> Iterator[torch.Tensor]:
        return iter([self]) if dynamic(self) else original_iter(self)

    def length(self: torch.Tensor) -> int:  # list() asks for the length first
        return 1 if dynamic(self) else original_len(self)

    torch.Tensor.__iter__, torch.Tensor.__len__ = iterate, length  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.Tensor.__iter__ = original_iter  # type: ignore[method-assign]
        torch.Tensor.__len__ = original_len  # type: ignore[method-assign]


class EmbeddingGraph(_VLMGraph):
    name = "embedding"

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        hidden = text_config(config).hidden_size
        specs = [
            TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE)),
            TensorSpec("image_features", None, (IMAGE_TOKENS, hidden)),
        ]
        if layers := deepstack_layers(config):  # placed per position too (vlm_deepstack)
            specs.append(TensorSpec(DEEPSTACK_FEATURES, None, (layers, IMAGE_TOKENS, hidden)))
        if places_by_position_mask(model):  # Kosmos: no image token (vlm_position_mask)
            specs.append(position_mask_spec())
        return specs

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return ["inputs_embeds"] + ([DEEPSTACK] if deepstack_layers(config) else [])

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        ids = inputs["input_ids"]
        if POSITION_MASK in inputs:
            return (place_by_mask(model, ids, inputs[POSITION_MASK], inputs["image_features"]),)
        embeds = merge_image_features(model, ids, inputs["image_features"])
        if DEEPSTACK_FEATURES not in inputs:
            return (embeds,)
        is_image = ids == image_token_id(model.config)
        return embeds, placed_deepstack(is_image, inputs[DEEPSTACK_FEATURES].to(embeds.dtype))


def merge_image_features(
    model: torch.nn.Module, input_ids: torch.Tensor, features: torch.Tensor
) -> torch.Tensor:
    """The token embeddings with the i-th image-token position holding the i-th feature row
    (``masked_scatter``'s order), written as a gather so no count is data-dependent. Image tokens
    beyond the features (all of them with no features: a decode step) keep their embeddings."""
    from mobius.errors import UnsupportedError

    if prepends_image(model):  # GIT: the image's rows before the text
        return prepend_image_features(model, input_ids, features)
    embed = model.get_input_embeddings()
    token = image_token_id(model.config)
    if token is None:
        raise UnsupportedError(
            f"{model.config.model_type}: the config names no image token (image_token_id or "
            "image_token_index), so the embedding graph cannot place the image features"
        )
    return scatter_features(embed, input_ids, features, token)


class DecoderGraph(CausalLMTask):
    """The language model and its head on ``inputs_embeds``: the text-generation contract."""

    name = "decoder_model"
    mapping = VLM_MAPPING

    def __init__(self, parent: VisionLanguageTask | None = None, text_only: bool = False) -> None:
        self.parent = parent
        self.text_only = text_only
        # set where the captured attention cannot be used: why the cache is carried instead
        self.carried_cache_reason: str | None = None

    def supports(self, config: ArchitectureConfig) -> bool:
        return supports_image_text(config)

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return _auto()

    def for_config(self, config: ArchitectureConfig) -> DecoderGraph:
        """This graph for ``config``: a model that attends both ways within an image's tokens
        (``token_type_ids``) keeps its own attention and masks, with transformers' cache carried
        through the trace (the captured attention knows causal and padding masks only)."""
        both_ways = attends_both_ways(model_class(config), config.hf_config)
        if self.text_only or not (both_ways or prepends_image(config)):
            return self
        graph = DecoderGraph(self.parent)
        graph.attention_implementations = ("eager",)  # the sdpa pattern would rebuild the mask
        why = "within image tokens (token_type_ids)" if both_ways else "among its image rows"
        graph.carried_cache_reason = (
            f"the model attends both ways {why}: its own masks are kept, with transformers' "
            "cache carried through the trace"
        )
        return graph

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        if self.text_only:
            first = TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE))
        else:
            hidden = text_config(config).hidden_size
            first = TensorSpec("inputs_embeds", None, (BATCH, SEQUENCE, hidden))
        hf = config.hf_config
        positions = (position_axes(hf), BATCH, SEQUENCE) if multi_axis_positions(hf) else None
        if prepends_image(config) and not self.text_only:  # the text rows' only (vlm_prepend)
            positions = (BATCH, TEXT_SEQUENCE)
        specs = [
            first,
            TensorSpec("attention_mask", torch.int64, (BATCH, SEQUENCE)),
            TensorSpec("position_ids", torch.int64, positions or (BATCH, SEQUENCE)),
        ]
        if takes_token_type_ids(model) and not self.text_only:
            specs.append(TensorSpec("token_type_ids", torch.int64, (BATCH, SEQUENCE)))
        if deepstack_layers(config) and not self.text_only:
            layers, hidden = deepstack_layers(config), text_config(config).hidden_size
            specs.append(TensorSpec(DEEPSTACK, None, (layers, BATCH, SEQUENCE, hidden)))
        if decoder_reads_position_mask(model) and not self.text_only:  # Kosmos-2.5's segments
            specs.append(position_mask_spec())
        return specs

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        inputs = dict(own_type_ids(model, inputs))
        deepstack = inputs.pop(DEEPSTACK, None)
        model = language_model(model)
        with masks_without_vmap(), added_deepstack(model, deepstack):
            out = model(**_model_positions(model, inputs), use_cache=False, return_dict=True)
        return (out.logits,)

    def call_with_cache(
        self,
        model: torch.nn.Module,
        inputs: dict[str, torch.Tensor],
        cache: Any,
        mask_spans_past: bool = True,
    ) -> tuple[torch.Tensor, Any]:
        if not mask_spans_past:
            new = inputs["position_ids"].shape[-1]
            inputs = {**inputs, "attention_mask": inputs["attention_mask"][:, -new:]}
        inputs = own_type_ids(model, inputs)
        model = language_model(model)
        inputs = dict(_model_positions(model, inputs))
        deepstack = inputs.pop(DEEPSTACK, None)
        first_call = (
            _as_first_call(cache) if "token_type_ids" in inputs else contextlib.nullcontext()
        )
        with masks_without_vmap(), first_call, added_deepstack(model, deepstack):
            out = model(
                **inputs, **{cache_argument(model): cache}, use_cache=True, return_dict=True
            )
        return out.logits, returned_cache(out) or cache

    def cached_inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return [
            TensorSpec("attention_mask", s.dtype, (BATCH, TOTAL))
            if s.name == "attention_mask"
            else s
            for s in self.inputs(config, model)
        ]


def supports_image_text(config: ArchitectureConfig) -> bool:
    """The config has an image-text-to-text class with its own features method (``vlm_inputs``'s
    ``FEATURE_METHODS``, or the image projection of a model that prepends it: GIT)."""

    in_mapping = type(config.hf_config) in auto_mapping(VLM_MAPPING)
    return in_mapping and image_features_method(config) is not None


class VisionLanguageTask(Task):
    """Image-text-to-text: ``vision_encoder``, ``embedding`` and ``decoder_model``."""

    name = "image-text-to-text"
    mapping = VLM_MAPPING
    alternative = "to convert its text decoder alone, pass --task text-generation"

    def __init__(self) -> None:
        self.graphs: list[Task] = [VisionGraph(self), EmbeddingGraph(self), DecoderGraph(self)]

    def supports(self, config: ArchitectureConfig) -> bool:
        return supports_image_text(config)

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return _auto()

    def manifest(self, config: ArchitectureConfig) -> dict[str, Any]:
        """What mobius.json says beyond the graphs: the image token and the position scheme."""
        hf = config.hf_config
        has_images = any(graph.name == IMAGE.encoder for graph in self.graphs)
        manifest = {
            "modalities": [IMAGE.name] if has_images else [],
            "image_token_id": image_token_id(hf),
            "position_ids": "multi-axis" if multi_axis_positions(hf) else "sequence",
            "eos_token_id": getattr(text_config_of(hf), "eos_token_id", None),
        }
        manifest.update(images_per_call(hf, image_features_method(config)))
        manifest.update(placement_manifest(hf))  # GIT: its image rows before the text
        manifest.update(mask_manifest(model_class(config)))  # Kosmos: placed by a mask
        if multi_axis_positions(hf):  # the recipe runtime.vlm computes them by (vlm_canvas)
            manifest.update(position_manifest(hf))
        return manifest

    def runtime_files(
        self, models: dict[str, Any], config: ArchitectureConfig, checkpoint_dir: Any
    ) -> tuple[dict[str, str], str | None]:
        """``genai_config.json`` where onnxruntime-genai runs the family (``runtime/genai_vlm.py``),
        and else why not (recorded in mobius.json as ``genai``)."""
        from mobius.runtime.genai_vlm import vlm_genai_files

        return vlm_genai_files(
            models, config.hf_config, checkpoint_dir, image_token_id(config.hf_config)
        )


class TextOnlyTask(VisionLanguageTask):
    """``--features text-only``: the decoder alone, taking ``input_ids``."""

    def __init__(self) -> None:
        self.graphs = [DecoderGraph(self, text_only=True)]


IMAGE_TEXT_TO_TEXT = VisionLanguageTask()
TEXT_ONLY_TASK = TextOnlyTask()


def apply_features(task: Task, features: tuple[str, ...] | list[str] | None) -> Task:
    """The task ``--features`` asks for: ``text-only`` turns image-text-to-text into its decoder."""
    if not features or TEXT_ONLY not in features:
        return task
    if not isinstance(task, VisionLanguageTask):  # checked after the build (mobius/features)
        return task
    return getattr(task, "text_only_task", TEXT_ONLY_TASK)  # audio_llm.py has its own
