"""A pipeline's transformers text encoder (CLIP, CLIP with projection, T5 encoder), through the
transformers trace: ``input_ids`` -> ``last_hidden_state``, ``pooler_output`` and ``text_embeds``
(each where the class returns it), as diffusers pipelines call it (no attention mask)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from mobius.diffusers.components import emit_graph, graph_package
from mobius.errors import ConfigError
from mobius.output.package import ModelPackage
from mobius.sources import config as config_mod
from mobius.sources import resolve as source_mod
from mobius.sources.config import ArchitectureConfig
from mobius.sources.resolve import Source
from mobius.synth.chain import Prepared, trace_with_fallbacks
from mobius.synth.decompose import decompose_unlowered
from mobius.tasks.base import BATCH, SEQUENCE, Task, TensorSpec
from mobius.tasks.nested import FromConfig

OUTPUTS = ("last_hidden_state", "pooler_output", "text_embeds")
# what each text encoder class returns of OUTPUTS
CLASS_OUTPUTS = {
    "CLIPTextModel": ("last_hidden_state", "pooler_output"),
    "CLIPTextModelWithProjection": ("last_hidden_state", "text_embeds"),
    "T5EncoderModel": ("last_hidden_state",),
    "UMT5EncoderModel": ("last_hidden_state",),
}


class TextEncoderTask(Task):
    """``input_ids`` into the text encoder class ``cls`` named by ``model_index.json``."""

    name = "text-encoder"
    padding_mask_input = None  # pipelines pass no mask: every token is attended
    # CLIP's text attention is causal, and the captured attention builds a causal mask from an
    # attention_mask input, which this contract has not: transformers' sdpa, lowered op by op
    attention_implementations = ("sdpa", "eager")

    def __init__(self, cls: type) -> None:
        self.cls = cls
        self.output_names = CLASS_OUTPUTS.get(cls.__name__, ("last_hidden_state",))

    def supports(self, config: ArchitectureConfig) -> bool:
        return True

    def auto_class(self, config: ArchitectureConfig) -> Any:
        return FromConfig(self.cls)

    def inputs(self, config: ArchitectureConfig, model: torch.nn.Module) -> list[TensorSpec]:
        return [TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE))]

    def outputs(self, config: ArchitectureConfig) -> list[str]:
        return list(self.output_names)

    def call(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple:
        out = model(input_ids=inputs["input_ids"], return_dict=True)
        return tuple(out[name] for name in self.output_names)


def _text_class(name: str) -> type:
    import transformers

    cls = getattr(transformers, name, None)
    if not isinstance(cls, type):
        raise ConfigError(f"model_index.json names the transformers class '{name}', which has none")
    return cls


def prepare_text_encoder(source: Source, cls_name: str, dtype: torch.dtype) -> Prepared:
    hf = config_mod.hf_config_from_dict(source.config)
    arch = config_mod.from_hf(hf)
    task = TextEncoderTask(_text_class(cls_name))
    prepared = trace_with_fallbacks(source, arch, task, dtype)
    prepared.traced.program = decompose_unlowered(prepared.traced.program)
    return prepared


def text_encoder_package(
    folder: Path, cls_name: str, torch_dtype: torch.dtype, dtype: str, weights: bool, trust: bool
) -> ModelPackage:
    source = source_mod.resolve(folder, trust_remote_code=trust, need_weights=weights)
    prepared = prepare_text_encoder(source, cls_name, torch_dtype)
    model, report = emit_graph(prepared, weights=weights, src=str(folder))
    return graph_package(model, report, prepared, dtype=dtype, component=folder.name)
