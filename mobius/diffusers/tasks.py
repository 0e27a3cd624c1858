"""The I/O contracts of diffusers components (CONTRACTS.md, "Diffusers pipelines").

Each graph of a component is a Task like the transformers ones: which inputs it takes (named
dimensions stay dynamic) and how to call the diffusers model on them. A component with two
graphs (a VAE: encoder and decoder) is a list of such tasks over the same model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from mobius.diffusers import family_sizes
from mobius.diffusers.axes import (  # noqa: F401 - re-exported: the contracts' axis names
    BATCH_FRAMES,
    FACE_FRAMES,
    FRAMES,
    HEIGHT,
    IMAGE_SEQUENCE,
    INPUT_HEIGHT,
    INPUT_WIDTH,
    LENGTH,
    NOISE_LEVELS,
    PACKED,
    PATCHES,
    POSE_FRAMES,
    REFERENCE_TOKENS,
    REFERENCES,
    SAMPLE_FRAMES,
    SAMPLE_HEIGHT,
    SAMPLE_WIDTH,
    SEQUENCE_2,
    TEXT_AND_IMAGE,
    TEXT_LAYERS,
    TEXT_TIME_IMAGE,
    WIDTH,
)
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec

# axes that follow another as ``a * axis + b``: (axis, a, b), fed so (related_sizes) and fixed
# with it (fixed_axes); the model states the relation in its trace (overrides/wan_animate.py)
DERIVED_AXES = {POSE_FRAMES: (FRAMES, 1, -1), FACE_FRAMES: (FRAMES, 4, -7)}
# sizes the trace runs at: distinct, so that no two dynamic axes are unified, and multiples of 8
# so that every down-sampling of a small UNet or VAE divides them
EXAMPLE_SIZES = {
    BATCH: 2, SEQUENCE: 7, HEIGHT: 24, WIDTH: 40, IMAGE_SEQUENCE: 12, FRAMES: 5, LENGTH: 40,
    NOISE_LEVELS: 3, TEXT_LAYERS: 5, INPUT_HEIGHT: 4, INPUT_WIDTH: 6,
    "image_height": 192, "image_width": 320,  # a ControlNet's conditioning image: 8x the latents
}  # fmt: skip

Specs = Callable[[Any], list[TensorSpec]]
Call = Callable[[torch.nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, ...]]


class DiffusersTask(Task):
    """One graph of a diffusers component: its inputs and outputs, and the call between them."""

    attention_implementations = ("sdpa",)
    padding_mask_input = None  # no padding mask: attention over every token

    def __init__(self, name: str, inputs: Specs, call: Call, outputs: tuple[str, ...]) -> None:
        self.name = name
        self._inputs = inputs
        self._call = call
        self.output_names = outputs

    def supports(self, config: ArchitectureConfig) -> bool:
        return True

    def optional_inputs(self, config: ArchitectureConfig) -> set[str]:
        """Inputs the model's forward may go without: the trace drops those the graph never
        reads (a ``timestep`` that a config without adaptive norms ignores)."""
        return set()

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return self._inputs(config.hf_config)

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return list(self.output_names)

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        return self._call(model, inputs)

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        sizes = related_sizes(config.hf_config, EXAMPLE_SIZES)
        shape = [d if isinstance(d, int) else sizes.get(d, 5) for d in spec.dims]
        return torch.zeros(shape, dtype=spec.dtype or dtype, device="meta")


def related_sizes(cfg: Any, sizes: dict[str, int]) -> dict[str, int]:
    """``sizes`` with the axes that follow others made to follow them as the config says: a
    ControlNet's conditioning image is the latents' size times 2 per stride-2 level of its
    conditioning embedding; frames are a multiple of a temporal patch (CogVideoX 1.5); latents
    given as patch tokens number the patches of the image beside them (SD3.5 ControlNets); a
    joint sequence is the prompt then the patch tokens; frames folded into the batch number
    batch times frames; a second text is 3 tokens longer than the first (any other length); a
    token per patch of the latents numbers their patches; a packed sequence holds the prompt's,
    the video's patch tokens and the audio's frames; packed references number the rows' counts
    (``reference_counts``); a VAE's image is its latents' size times 2
    per level of ``block_out_channels`` but the last; Wan Animate's pose and face frames follow
    its video's (``DERIVED_AXES``)."""
    out = dict(sizes)
    levels = (
        cfg.get("conditioning_embedding_out_channels")
        or cfg.get("ctrl_conditioning_embedding_out_channels")
        or (16, 32, 96, 256)
    )
    factor = 2 ** (len(levels) - 1)
    out["image_height"], out["image_width"] = factor * sizes[HEIGHT], factor * sizes[WIDTH]
    if cfg.get("use_pos_embed") is False:  # latents as patch tokens beside their image
        patch = cfg.get("patch_size", 2)
        out[IMAGE_SEQUENCE] = (sizes[HEIGHT] // patch) * (sizes[WIDTH] // patch)
    out[TEXT_AND_IMAGE] = sizes[SEQUENCE] + out[IMAGE_SEQUENCE]
    step = cfg.get("patch_size_t")
    if isinstance(step, int) and step > 1:
        out[FRAMES] = -(-sizes[FRAMES] // step) * step
    out[BATCH_FRAMES] = sizes[BATCH] * out[FRAMES]
    out[SEQUENCE_2] = sizes[SEQUENCE] + 3
    patch = cfg.get("patch_size") if isinstance(cfg.get("patch_size"), int) else 2
    out[PATCHES] = (sizes[HEIGHT] // patch) * (sizes[WIDTH] // patch)
    out[PACKED] = sizes[SEQUENCE] + out[IMAGE_SEQUENCE] + sizes[LENGTH]
    blocks = cfg.get("block_out_channels")  # one int in UVit2D's config: no VAE levels
    scale = 2 ** (len(blocks if isinstance(blocks, (list, tuple)) else (0,) * 4) - 1)
    out[SAMPLE_HEIGHT], out[SAMPLE_WIDTH] = scale * sizes[HEIGHT], scale * sizes[WIDTH]
    out[TEXT_TIME_IMAGE] = sizes[SEQUENCE] + 1 + out[PATCHES]
    if strides := cfg.get("decoder_upsample_strides"):  # LTX-2's diffusion decoder
        out[SAMPLE_FRAMES], out[SAMPLE_HEIGHT], out[SAMPLE_WIDTH] = _ltx2_pixels(cfg, strides, out)
    out[REFERENCES] = sum(reference_counts(sizes[BATCH]))
    out |= derived_sizes(out)
    out[REFERENCE_TOKENS] = _reference_tokens(cfg, out)
    out |= family_sizes.far_cache_lengths(cfg, out)  # AnyFlow FAR's KV-cache buffers
    out |= family_sizes.cosmos3_sizes(cfg, out)  # Cosmos 3's noisy frames and joint sequence
    return out


def reference_counts(batch: int) -> list[int]:
    """How many packed references each batch row holds in the inputs fed: ``1 + (2b + 1) mod 3``
    for row ``b`` (2, 1, 3, 2, ...), so that rows hold different counts (the graph takes any)."""
    return [1 + (2 * row + 1) % 3 for row in range(batch)]


def _reference_tokens(cfg: Any, sizes: dict[str, int]) -> int:
    """Wan Animate 2's cached reference: the patches of one patch frame fewer than the latents'."""
    pt, ph, pw = (
        cfg.get("patch_size") if isinstance(cfg.get("patch_size"), (list, tuple)) else (1, 2, 2)
    )
    return (sizes[FRAMES] // pt - 1) * (sizes[HEIGHT] // ph) * (sizes[WIDTH] // pw)


def derived_sizes(sizes: dict[str, Any]) -> dict[str, int]:
    """The ``DERIVED_AXES`` of the axes ``sizes`` gives."""
    return {
        name: a * sizes[axis] + b
        for name, (axis, a, b) in DERIVED_AXES.items()
        if isinstance(sizes.get(axis), int)
    }


def _ltx2_pixels(cfg: Any, strides: Any, sizes: dict[str, int]) -> tuple[int, int, int]:
    """LTX-2's diffusion decoder's pixel grid: its latent frames padded by ``pad`` copies of the
    last, each stride-2 upsampling doubling them less the duplicate first, the padding's frames
    cropped; height and width times the strides and the patch."""
    pad = (cfg.get("decoder_stage_kernels")[0][0] // 2) * 2
    frames = sizes[FRAMES] + pad
    for stride in strides:
        frames = frames * stride[0] - (1 if stride[0] == 2 else 0)
    frames -= pad * cfg.get("temporal_compression_ratio")
    height, width = (cfg.get("patch_size") * math.prod(s[axis] for s in strides) for axis in (1, 2))
    return frames, height * sizes[HEIGHT], width * sizes[WIDTH]


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output


# --- UNets ------------------------------------------------------------------------------------


def _timestep() -> TensorSpec:
    return TensorSpec("timestep", torch.float32, (BATCH,))


def unet_condition_inputs(cfg: Any) -> list[TensorSpec]:
    """``sample``, ``timestep``, ``encoder_hidden_states``; SDXL's added conditioning
    (``addition_embed_type == "text_time"``) adds ``text_embeds`` and ``time_ids``."""
    specs = [
        TensorSpec("sample", None, (BATCH, cfg.get("in_channels", 4), HEIGHT, WIDTH)),
        _timestep(),
        TensorSpec(
            "encoder_hidden_states",
            None,
            (BATCH, SEQUENCE, cfg.get("encoder_hid_dim") or cfg.get("cross_attention_dim")),
        ),
    ]
    if cfg.get("addition_embed_type") == "text_time":
        times = 6  # SDXL's original size, crop and target size
        text = cfg.get("projection_class_embeddings_input_dim") - times * cfg.get(
            "addition_time_embed_dim"
        )
        specs += [
            TensorSpec("text_embeds", None, (BATCH, text)),
            TensorSpec("time_ids", None, (BATCH, times)),
        ]
    if cfg.get("class_embed_type") is not None or cfg.get("num_class_embeds"):
        specs.append(_class_labels(cfg))
    return specs


def _class_labels(cfg: Any) -> TensorSpec:
    if cfg.get("num_class_embeds"):
        return TensorSpec("class_labels", torch.int64, (BATCH,))
    return TensorSpec("class_labels", None, (BATCH,))


def call_unet_condition(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    added = {k: x[k] for k in ("text_embeds", "time_ids") if k in x}
    out = model(
        x["sample"],
        x["timestep"],
        x["encoder_hidden_states"],
        class_labels=x.get("class_labels"),
        added_cond_kwargs=added or None,
        return_dict=False,
    )
    return (_first(out),)


def unet_inputs(cfg: Any) -> list[TensorSpec]:
    """UNet2DModel: ``sample`` and ``timestep`` (and ``class_labels`` where it has classes)."""
    specs = [
        TensorSpec("sample", None, (BATCH, cfg.get("in_channels", 3), HEIGHT, WIDTH)),
        _timestep(),
    ]
    if cfg.get("class_embed_type") is not None or cfg.get("num_class_embeds"):
        specs.append(_class_labels(cfg))
    return specs


def call_unet(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    out = model(x["sample"], x["timestep"], class_labels=x.get("class_labels"), return_dict=False)
    return (_first(out),)


UNET_CONDITION = DiffusersTask("unet", unet_condition_inputs, call_unet_condition, ("out_sample",))
UNET = DiffusersTask("unet", unet_inputs, call_unet, ("out_sample",))


# --- VAEs -------------------------------------------------------------------------------------


def video_latents(cls: type) -> bool:
    """``cls`` takes video, ``[batch, channels, frames, height, width]``: a diffusion transformer
    named 3D, or a VAE whose module convolves in 3D (AutoencoderKLTemporalDecoder's encoder is
    2D: it takes frames as a batch)."""
    import inspect
    import sys

    name = cls.__name__
    if "Transformer" in name or "DiT" in name:
        return "3D" in name
    if name == "AutoencoderKLTemporalDecoder":
        return False
    try:
        return "Conv3d" in inspect.getsource(sys.modules[cls.__module__])
    except (OSError, TypeError, KeyError):
        return False


def _image_axes(video: bool, frames: int | str = FRAMES) -> tuple:
    return (frames, HEIGHT, WIDTH) if video else (HEIGHT, WIDTH)


def _first_key(cfg: Any, names: tuple[str, ...], default: int) -> int:
    for name in names:
        if isinstance(cfg.get(name), int):
            return cfg.get(name)
    return default


# VAEs whose config's in_channels is not the image's (Mochi's encoder adds Fourier features)
IMAGE_CHANNELS = {"AutoencoderKLMochi": 3}
# video VAEs specialised to images: a frame axis of 1 (QwenImage 2.1's convolutions fold the single
# frame away and refuse a second; its pipeline adds the axis to images)
SINGLE_FRAME_VAES = ("AutoencoderKLQwenImage21",)


def vae_encoder_inputs(
    cfg: Any, video: bool = False, channels: int | None = None, frames: int | str = FRAMES
) -> list:
    channels = channels or _first_key(cfg, ("in_channels", "input_channels"), 3)
    return [TensorSpec("sample", None, (BATCH, channels, *_image_axes(video, frames)))]


def vae_decoder_inputs(cfg: Any, video: bool = False, frames: int | str = FRAMES) -> list:
    latent = _first_key(cfg, ("latent_channels", "z_dim", "z_channels", "latent_dim"), 4)
    return [TensorSpec("latent_sample", None, (BATCH, latent, *_image_axes(video, frames)))]


def call_vae_encoder(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    """The latent distribution's parameters (mean and log-variance on channels), or the latents
    of a VAE without a distribution."""
    out = model.encode(x["sample"])
    dist = getattr(out, "latent_dist", None)
    if dist is not None:
        return (dist.parameters,)
    for name in ("latents", "latent"):  # AutoencoderTiny and VQModel; AutoencoderDC
        if getattr(out, name, None) is not None:
            return (getattr(out, name),)
    return (_first(out),)


def call_vae_decoder(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
    out = model.decode(x["latent_sample"])
    return (getattr(out, "sample", None) if hasattr(out, "sample") else _first(out),)


def vae_tasks(latent_output: str = "latent_parameters", cls: type | None = None) -> list:
    """The encoder and decoder graphs of VAE ``cls`` (``latents`` for VAEs with no
    distribution; video latents where the VAE convolves in 3D)."""
    video = cls is not None and video_latents(cls)
    channels = IMAGE_CHANNELS.get(cls.__name__) if cls is not None else None
    frames = 1 if cls is not None and cls.__name__ in SINGLE_FRAME_VAES else FRAMES
    return [
        DiffusersTask("vae_encoder", lambda cfg: vae_encoder_inputs(cfg, video, channels, frames),
                      call_vae_encoder, (latent_output,)),
        DiffusersTask("vae_decoder", lambda cfg: vae_decoder_inputs(cfg, video, frames),
                      call_vae_decoder, ("sample",)),
    ]  # fmt: skip


def fixed_size(task: DiffusersTask, arch: ArchitectureConfig) -> DiffusersTask | None:
    """``task`` with height and width fixed to the config's ``sample_size`` (None where the task
    has no such axes or the config no size): for models that only take their trained size."""
    size = arch.hf_config.get("sample_size")
    if isinstance(size, int):
        size = (size, size)
    if not (isinstance(size, (list, tuple)) and len(size) == 2):
        return None
    specs = task.inputs(arch, None)
    if not any(HEIGHT in s.dims for s in specs):
        return None
    return fixed_axes(task, arch, {HEIGHT: int(size[0]), WIDTH: int(size[1])})


def fixed_axes(
    task: DiffusersTask,
    arch: ArchitectureConfig,
    sizes: dict[str, int],
    drop: frozenset[str] = frozenset(),
) -> DiffusersTask:
    """``task`` with the named axes of ``sizes`` fixed to those sizes (and the axes derived from
    them), less the inputs ``drop``."""
    sizes = sizes | derived_sizes(sizes)

    def inputs(cfg: Any) -> list[TensorSpec]:
        return [
            TensorSpec(s.name, s.dtype, tuple(sizes.get(d, d) for d in s.dims))
            for s in task._inputs(cfg)
            if s.name not in drop
        ]

    derived = DiffusersTask(task.name, inputs, task.call, tuple(task.outputs(arch)))
    derived.example_value = task.example_value  # type: ignore[method-assign]
    derived.optional_inputs = task.optional_inputs  # type: ignore[method-assign]
    return derived
