"""Every single-graph task that is "the HF model with one head, called once" (CONTRACTS.md).

One class, parameterised by the task's name, the transformers auto mapping that gives the head's
model class for a config, and the contract's output names. The inputs follow from the model's
modality, which its class states as ``main_input_name``: token ids (text), ``pixel_values``
(vision) or ``input_values`` (raw audio).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import torch

from mobius.errors import ConfigError
from mobius.sources import remote_code
from mobius.sources.config import ArchitectureConfig
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec, accepted
from mobius.tasks.nested import FromConfig

CHOICES = "num_choices"
SAMPLES = "num_samples"
FRAMES = "num_frames"
TEXT_BATCH = "text_batch_size"
IMAGE_BATCH = "image_batch_size"

# the modalities a model class can take first, by its ``main_input_name``
TEXT, VISION, AUDIO = "input_ids", "pixel_values", "input_values"
SPECTROGRAM = "input_features"
# transformers' auto mapping of the vision-language heads (image-text-to-text)
VLM_MAPPING = "MODEL_FOR_IMAGE_TEXT_TO_TEXT"


def auto_mapping(mapping: str) -> Any:
    """transformers' lazy config class -> model class mapping ``MODEL_FOR_..._MAPPING``."""
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, f"{mapping}_MAPPING")


def class_names(mapping: str, model_type: str) -> tuple[str, ...]:
    """The model class names ``mapping`` lists for ``model_type`` (none if it has no entry)."""
    from transformers.models.auto import modeling_auto

    names = getattr(modeling_auto, f"{mapping}_MAPPING_NAMES").get(model_type, ())
    return (names,) if isinstance(names, str) else tuple(names)


def vision_config(hf: Any) -> Any:
    """The config that holds the image size: the vision tower's in a dual encoder."""
    return getattr(hf, "vision_config", None) or hf


def image_size(hf: Any) -> tuple[int, int, int]:
    """(channels, height, width) that the vision tower takes; convolutional models, whose config
    has no size, take any: traced at 224 (their image processors' usual size)."""
    vision = vision_config(hf)
    size = getattr(vision, "image_size", None) or 224
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    return getattr(vision, "num_channels", 3), height, width


def text_inputs(
    config: ArchitectureConfig, model: torch.nn.Module, dims: tuple[str, ...]
) -> list[TensorSpec]:
    """``input_ids``, ``attention_mask`` and ``token_type_ids``, each where ``model`` takes it."""
    params = inspect.signature(model.forward).parameters
    text = config.hf_config.get_text_config()
    specs = [TensorSpec("input_ids", torch.int64, dims)]
    if "attention_mask" in params:
        specs.append(TensorSpec("attention_mask", torch.int64, dims))
    if "token_type_ids" in params and getattr(text, "type_vocab_size", 0):
        specs.append(TensorSpec("token_type_ids", torch.int64, dims))
    return specs


def pixel_inputs(config: ArchitectureConfig, batch: str = BATCH) -> list[TensorSpec]:
    return [TensorSpec("pixel_values", None, (batch, *image_size(config.hf_config)))]


def audio_inputs(config: ArchitectureConfig) -> list[TensorSpec]:
    """Raw samples, with a mask where the model's feature extractor returns one: wav2vec2-style
    extractors do exactly when the model normalises its conv features per layer."""
    specs = [TensorSpec("input_values", None, (BATCH, SAMPLES))]
    if getattr(config.hf_config, "feat_extract_norm", None) == "layer":
        specs.append(TensorSpec("attention_mask", torch.int64, (BATCH, SAMPLES)))
    return specs


def _feature_width(hf: Any) -> int | None:
    """Features per frame of a spectrogram model: its projection's input width, else its mel
    bins (on the config or its encoder's), else Speech2Text-style channels."""
    encoder = getattr(hf, "encoder_config", None)
    for source in (hf, encoder):
        for key in ("feature_projection_input_dim", "num_mel_bins"):
            width = getattr(source, key, None)
            if isinstance(width, int):
                return width
    per_channel = getattr(hf, "input_feat_per_channel", None)
    return per_channel * getattr(hf, "input_channels", 1) if per_channel else None


def spectrogram_inputs(config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
    """``input_features`` in the layout the model's forward takes (CONTRACTS.md, speech): Whisper's
    ``[batch, mel, frames]`` over its fixed window, else ``[batch, frames, features]``; plus a
    frame mask where the forward reads one."""
    hf = config.hf_config
    mel = getattr(hf, "num_mel_bins", None)
    if isinstance(getattr(hf, "max_source_positions", None), int) and isinstance(mel, int):
        # Whisper: its encoder checks for the whole 30 s window (2 frames per position)
        return [TensorSpec(SPECTROGRAM, None, (BATCH, mel, 2 * hf.max_source_positions))]
    width = _feature_width(hf)
    if width is None:
        raise ConfigError(
            f"'{config.model_type}' takes input_features, but its config names no feature width "
            "(num_mel_bins, feature_projection_input_dim, input_feat_per_channel)"
        )
    specs = [TensorSpec(SPECTROGRAM, None, (BATCH, FRAMES, width))]
    if "attention_mask" in inspect.signature(model.forward).parameters:
        specs.append(TensorSpec("attention_mask", torch.int64, (BATCH, FRAMES)))
    return specs


def patch_spectrogram_inputs(config: ArchitectureConfig) -> list[TensorSpec] | None:
    """AST-style ``input_values``: a spectrogram ``[batch, max_length, mel]`` cut into patches
    at a fixed size (its position table is for that many patches); None for raw samples."""
    hf = config.hf_config
    frames, mel = getattr(hf, "max_length", None), getattr(hf, "num_mel_bins", None)
    if isinstance(frames, int) and isinstance(mel, int):
        return [TensorSpec(AUDIO, None, (BATCH, frames, mel))]
    return None


class HeadTask(Task):
    """The model class ``mapping`` gives the config, called once on the contract's inputs.

    ``multiple_choice`` adds the choices axis to the text inputs; ``dual`` takes text and images
    with batches of their own (CLIP-style dual encoders); ``classifies`` says the outputs are
    scores over the config's ``id2label``.
    """

    def __init__(
        self,
        name: str,
        mapping: str,
        outputs: tuple[str, ...],
        *,
        classifies: bool = False,
        multiple_choice: bool = False,
        dual: bool = False,
    ) -> None:
        self.name = name
        self.mapping = mapping
        self.output_names = outputs
        self.classifies = classifies
        self.multiple_choice = multiple_choice
        self.dual = dual

    def on_encoder_decoder(self) -> HeadTask:
        """This head for an encoder-decoder model: transformers' own attention, lowered op by op.

        Its decoder runs on the shifted ``input_ids`` with no padding mask of its own (HF passes
        none), while the captured attention would mask the decoder's keys by ``attention_mask``
        too: with left padding the real positions would differ. Tracing HF's masks keeps them."""
        task = copy.copy(self)
        task.attention_implementations = ("sdpa", "eager")
        return task

    def supports(self, config: ArchitectureConfig) -> bool:
        if remote_code.class_names(config.hf_config, self.mapping):
            return True
        return type(config.hf_config) in auto_mapping(self.mapping)

    def model_class(self, config: ArchitectureConfig) -> type:
        """The mapping's class; where it lists several (DeiT's with and without a distillation
        head), the one ``architectures`` names, else the first. The checkpoint's own class
        where its ``auto_map`` names one (``--trust-remote-code``)."""
        own = remote_code.model_class(config.hf_config, self.mapping)
        if own is not None:
            return own
        found = auto_mapping(self.mapping)[type(config.hf_config)]
        if not isinstance(found, (tuple, list)):
            return found
        named = [c for c in found if c.__name__ in config.architectures]
        return (named or list(found))[0]

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return FromConfig(self.model_class(config))

    def modality(self, config: ArchitectureConfig) -> str:
        return getattr(self.model_class(config), "main_input_name", TEXT)

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        if self.dual:
            text = [
                TensorSpec(s.name, s.dtype, (TEXT_BATCH, SEQUENCE))
                for s in text_inputs(config, model, (BATCH, SEQUENCE))
            ]
            return text + pixel_inputs(config, IMAGE_BATCH)
        main = getattr(model, "main_input_name", TEXT)
        if main == VISION:
            return pixel_inputs(config)
        if main == AUDIO:
            return patch_spectrogram_inputs(config) or audio_inputs(config)
        if main == SPECTROGRAM:
            return spectrogram_inputs(config, model)
        dims = (BATCH, CHOICES, SEQUENCE) if self.multiple_choice else (BATCH, SEQUENCE)
        return text_inputs(config, model, dims)

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return list(self.output_names)

    def call(
        self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, ...]:
        extra = {}
        if "use_cache" in inspect.signature(model.forward).parameters:
            # an encoder-decoder's head runs its decoder once over the shifted input_ids, as HF
            # does without decoder_input_ids; a cache would only add empty tensors to the trace
            extra["use_cache"] = False
        out = model(**accepted(model, **inputs, **extra, return_dict=True))
        if isinstance(out, (torch.Tensor, tuple)):  # no ModelOutput: the contract's, in order
            values = (out,) if isinstance(out, torch.Tensor) else out
            out = dict(zip(self.output_names, values, strict=False))
        return tuple(
            contract_output(out, name, len(self.output_names)) for name in self.output_names
        )

    def example_value(
        self, spec: TensorSpec, config: ArchitectureConfig, dtype: torch.dtype
    ) -> torch.Tensor:
        # distinct sizes so the trace unifies no two axes; audio needs enough samples for every
        # convolution of the feature encoder (wav2vec2's strides multiply to 320)
        sizes = {CHOICES: 3, TEXT_BATCH: 3, IMAGE_BATCH: 2, SAMPLES: 4003, FRAMES: 67}
        shape = [sizes.get(d, d) for d in spec.dims]
        return super().example_value(TensorSpec(spec.name, spec.dtype, tuple(shape)), config, dtype)


def contract_output(out: Any, name: str, count: int) -> torch.Tensor:
    """The model output the contract calls ``name``. A head with one output that returns its only
    tensor under another name (PP-LCNet's classifier gives its scores as ``last_hidden_state``)
    gives that tensor; anything else must use the contract's name (a KeyError names it)."""
    if name in out:
        return out[name]
    tensors = [value for value in out.values() if isinstance(value, torch.Tensor)]
    if count == 1 and len(tensors) == 1:
        return tensors[0]
    return out[name]
