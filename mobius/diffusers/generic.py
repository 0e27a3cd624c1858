"""The contract of any other diffusers model class (CONTRACTS.md, "Diffusers pipelines", last
bullet): ``forward``'s tensor arguments under their own names in, the fields of its output
dataclass out (``sample`` as ``out_sample``, a list as ``name.{i}``, others under their names).

Each argument's shape comes from the config: the transformer table (``transformers2d._spec``)
and the arguments of UNets beyond the 2D ones (1D and video ``sample``, SVD's
``added_time_ids``), prior transformers (``proj_embedding``) and latent-space ControlNets
(``controlnet_cond`` the size of the latents). An optional argument is an input only where the
config makes the model read it (``optional_args``); the trace drops one the graph never reads.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from mobius.diffusers import argument_rules, folded_frames, latent_grid, list_args, structured_args
from mobius.diffusers.tasks import (
    FRAMES,
    HEIGHT,
    IMAGE_SEQUENCE,
    WIDTH,
    DiffusersTask,
    video_latents,
)
from mobius.diffusers.transformers2d import FRAMES_FIRST, OPTIONAL_CALL_ARGS, _spec, _text_width
from mobius.diffusers.tuple_outputs import named_outputs
from mobius.errors import UnsupportedError
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

LENGTH = "sample_length"  # 1D latents: [batch, channels, length]
FLOAT = None  # the model's dtype
# UNets taking video frames first, [batch, frames, channels, height, width], as their forward does
FRAMES_FIRST_UNETS = ("UNetSpatioTemporalConditionModel",)


def sample_layout(cls: type) -> str:
    """How ``cls`` takes its latents: "1d", "frames_first", "video" or "image"."""
    name = cls.__name__
    if "1D" in name:
        return "1d"
    if name in FRAMES_FIRST + FRAMES_FIRST_UNETS:
        return "frames_first"
    if "3D" in name or "Motion" in name or video_latents(cls):
        return "video"
    return "image"


def _latent_axes(layout: str, channels: int) -> tuple:
    if layout == "1d":
        return (BATCH, channels, LENGTH)
    if layout == "frames_first":
        return (BATCH, FRAMES, channels, HEIGHT, WIDTH)
    if layout == "video":
        return (BATCH, channels, FRAMES, HEIGHT, WIDTH)
    return (BATCH, channels, HEIGHT, WIDTH)


def tokens_in(cfg: Any, cls: type) -> bool:
    """``cls`` takes its latents already patch-embedded (an SD3.5 ControlNet without its own
    position embedding: ``use_pos_embed`` false), one token per patch of ``controlnet_cond``."""
    return cls.__name__ == "SD3ControlNetModel" and cfg.get("use_pos_embed") is False


def _image_conditioning(cfg: Any) -> bool:
    """The ControlNet embeds an image by strided convolutions (UNet ControlNets; ControlNet-XS)."""
    keys = ("conditioning_embedding_out_channels", "ctrl_conditioning_embedding_out_channels")
    return any(cfg.get(k) for k in keys)


def _added_time_ids(cfg: Any) -> TensorSpec | None:
    """SVD's fps, motion bucket and noise augmentation: one value per time embedding."""
    total, each = (
        cfg.get("projection_class_embeddings_input_dim"),
        cfg.get("addition_time_embed_dim"),
    )
    if not (isinstance(total, int) and isinstance(each, int) and each):
        return None
    return TensorSpec("added_time_ids", FLOAT, (BATCH, total // each))


def argument_spec(name: str, cfg: Any, cls: type) -> TensorSpec | None:
    """The graph input for ``cls.forward``'s argument ``name``, or None when the config gives no
    size for it."""
    ruled = argument_rules.rule_spec(name, cfg, cls)  # a class's own argument (argument_rules.py)
    if ruled is not None:
        return ruled
    layout = sample_layout(cls)
    channels = cfg.get("in_channels", 4)
    if name == "sample":
        return TensorSpec(name, FLOAT, _latent_axes(layout, channels))
    if name == "hidden_states" and tokens_in(cfg, cls):  # the transformer's embedded patches
        width = cfg.get("num_attention_heads") * cfg.get("attention_head_dim")
        return TensorSpec(name, FLOAT, (BATCH, IMAGE_SEQUENCE, width))
    if name == "hidden_states" and cls.__name__ == "PriorTransformer":
        return TensorSpec(name, FLOAT, (BATCH, cfg.get("embedding_dim")))
    if name == "proj_embedding":
        width = cfg.get("embedding_proj_dim") or cfg.get("embedding_dim")
        return TensorSpec(name, FLOAT, (BATCH, width)) if width else None
    if name == "encoder_hidden_states" and cls.__name__ == "PriorTransformer":
        if cfg.get("encoder_hid_proj_type") is None:
            return None  # read only through its projection
        return TensorSpec(name, FLOAT, (BATCH, cfg.get("num_embeddings"), cfg.get("embedding_dim")))
    if name == "controlnet_cond" and _image_conditioning(cfg):  # an image, downsampled
        channels = cfg.get("ctrl_conditioning_channels") or cfg.get("conditioning_channels") or 3
        return TensorSpec(name, FLOAT, (BATCH, channels, "image_height", "image_width"))
    if name == "controlnet_cond":  # a transformer ControlNet conditions on latents
        packed = "img_ids" in inspect.signature(cls.forward).parameters  # Flux: as tokens
        latents = _spec("hidden_states", cfg, "packed" if packed else "image")
        dims = list(latents.dims)
        dims[-1 if packed else 1] += cfg.get("extra_conditioning_channels") or 0
        return TensorSpec(name, FLOAT, tuple(dims))
    if name == "encoder_attention_mask":  # the text's padding: True = a token
        return TensorSpec(name, torch.bool, (BATCH, SEQUENCE))
    if name == "conditioning_scale":
        return TensorSpec(name, torch.float32, ())
    if name == "added_time_ids":
        return _added_time_ids(cfg)
    if name == "encoder_hidden_states" and "UNet" in cls.__name__:
        width = cfg.get("encoder_hid_dim") or cfg.get("cross_attention_dim")
        width = width[0] if isinstance(width, (list, tuple)) else width
        return TensorSpec(name, FLOAT, (BATCH, SEQUENCE, width)) if width else None
    if name == "hidden_states" and layout != "image":
        return TensorSpec(name, FLOAT, _latent_axes(layout, channels))
    packed = "img_ids" in inspect.signature(cls.forward).parameters  # Flux: latents as tokens
    spec = _spec(name, cfg, "packed" if packed else "image")
    if spec is None and name == "encoder_hidden_states" and _text_width(cfg):
        return TensorSpec(name, FLOAT, (BATCH, SEQUENCE, _text_width(cfg)))
    return spec


# optional in the signature, needed by the forward all the same
NEEDED = {"Kandinsky3UNet": {"encoder_attention_mask"}} | argument_rules.NEEDED


def optional_args(cfg: Any, cls: type) -> set[str]:
    """The optional forward arguments ``cls`` reads under ``cfg``."""
    wanted = {"timestep", "encoder_hidden_states", "pooled_projections", "conditioning_scale",
              "controlnet_cond"}  # fmt: skip
    wanted |= NEEDED.get(cls.__name__, set())
    if cfg.get("class_embed_type") is not None or cfg.get("num_class_embeds"):
        wanted.add("class_labels")
    if cfg.get("guidance_embeds"):
        wanted.add("guidance")
    if "img_ids" in inspect.signature(cls.forward).parameters:  # packed latents' positions
        wanted |= {"img_ids", "txt_ids"}
    return wanted


def output_names(output: Any) -> list[str]:
    """The graph output names of a model's output: dataclass fields in order, ``sample`` as
    ``out_sample``, a list or tuple field as ``name.{i}``."""
    if isinstance(output, torch.Tensor):
        return ["out_sample"]
    if isinstance(output, (tuple, list)) and not hasattr(output, "keys"):
        return [f"output.{i}" for i in range(len(output))]
    names = []
    for key, value in output.items():
        if isinstance(value, (tuple, list)):
            names += [f"{key}.{i}" for i in range(len(value))]
        elif isinstance(value, torch.Tensor):
            names.append("out_sample" if key == "sample" else key)
    return names


def _flatten(output: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(output, torch.Tensor):
        return (output,)
    values = output.values() if hasattr(output, "keys") else output
    flat: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, (tuple, list)):
            flat += list(value)
        elif isinstance(value, torch.Tensor):
            flat.append(value)
    return tuple(flat)


class ForwardTask(DiffusersTask):
    """A model class's own ``forward`` as its graph; the graph is named ``cls``'s component kind
    (``unet``, ``controlnet`` or ``transformer``)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls
        name = cls.__name__
        kind = "unet" if "UNet" in name else "controlnet" if "ControlNet" in name else "transformer"
        self._outputs: list[str] = []
        super().__init__(kind, self._specs, self._call_model, ())

    def _params(self) -> list[tuple[str, inspect.Parameter]]:
        return list(inspect.signature(self.cls.forward).parameters.items())[1:]

    def _specs(self, cfg: Any) -> list[TensorSpec]:
        wanted = optional_args(cfg, self.cls)
        specs = []
        for name, param in self._params():
            if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            if name in argument_rules.derived(self.cls):  # computed from the other inputs
                continue
            if name in structured_args.structured(self.cls):  # a list or dict: its members
                specs += structured_args.member_specs(name, cfg, self.cls)
                continue
            required = param.default is inspect.Parameter.empty
            if name in NEEDED.get(self.cls.__name__, ()):
                required = True
            elif not required and (name in OPTIONAL_CALL_ARGS or name not in wanted):
                continue
            spec = argument_spec(name, cfg, self.cls)
            if spec is not None:
                specs.append(spec)
            elif required:
                raise UnsupportedError(
                    f"{self.cls.__name__}'s forward requires '{name}', whose shape its config "
                    "does not give"
                )
        return specs

    def optional_inputs(self, config: Any) -> set[str]:
        return {n for n, p in self._params() if p.default is not inspect.Parameter.empty}

    def _call_model(self, model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple:
        kwargs = structured_args.assemble(self.cls, x) | argument_rules.derive(
            self.cls, model.config, x
        )
        kwargs = latent_grid.packed_arguments(self.cls, model.config, kwargs)
        kwargs = list_args.per_sample(self.cls, model, kwargs)  # lists where diffusers wants them
        if "return_dict" in dict(self._params()):
            kwargs["return_dict"] = True
        output = model(**kwargs)
        output = named_outputs(self.cls, output)  # a (dataclass, tensors) tuple: one dict
        output = list_args.stacked(
            self.cls, latent_grid.unpacked_output(self.cls, model.config, x, output)
        )
        # a field named as an input is prefixed, as ``sample`` is (a graph's names are unique)
        self._outputs = [f"out_{n}" if n in x else n for n in output_names(output)]
        return folded_frames.unfold(self.cls, x, _flatten(output))

    def outputs(self, config: Any) -> list[str]:
        if not self._outputs:  # not traced yet: the names of one call on meta
            from mobius.diffusers.trace import instantiate

            arch = config
            model = instantiate(arch, torch.float32)
            with torch.no_grad():
                self.call(model, {s.name: self.example_value(s, arch, torch.float32)
                                  for s in self.inputs(arch, model)})  # fmt: skip
        return list(self._outputs)


def forward_task(cls: type) -> ForwardTask:
    """The contract of any diffusers model class; UnsupportedError naming a required argument
    whose shape the config does not give."""
    for name, param in list(inspect.signature(cls.forward).parameters.items())[1:]:
        required = param.default is inspect.Parameter.empty and param.kind not in (
            param.VAR_KEYWORD, param.VAR_POSITIONAL,
        )  # fmt: skip
        if required and name not in KNOWN | argument_rules.ruled(cls) | structured_args.structured(
            cls
        ):
            raise UnsupportedError(
                f"mobius cannot size the diffusers class {cls.__name__}'s input '{name}' from "
                "its config"
            )
    return ForwardTask(cls)


KNOWN = frozenset(
    {"sample", "hidden_states", "timestep", "encoder_hidden_states", "proj_embedding",
     "controlnet_cond", "conditioning_scale", "added_time_ids", "pooled_projections",
     "class_labels", "img_ids", "txt_ids", "guidance", "original_size", "target_size",
     "encoder_attention_mask",
     "crop_coords"}
)  # fmt: skip
