"""Checkpoints that ship their own modeling code: config with ``auto_map``, the ``.py`` files
beside it, and safetensors with every parameter randomised (biases and norm weights included).

Each style is written the way such code is found on the hub (``mobius/testing/remote_models/``):
no cache at all, a legacy tuple cache, transformers' ``Cache`` API, a fork of an in-library model
under a new model type, and encoders with a feature-extraction and a classification head.
"""

from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

MODELS = Path(__file__).parent / "remote_models"
PACKAGE = "mobius.testing.remote_models"


@dataclass(frozen=True)
class Style:
    """One way of writing a model's own code: its files and the classes ``auto_map`` names."""

    config_module: str  # file (without .py) defining the config class
    config_class: str
    model_module: str
    auto_map: dict[str, str]  # auto class -> model class name (in ``model_module``)
    architecture: str  # the class the checkpoint is saved as
    files: tuple[str, ...]  # every .py file the checkpoint carries
    config: dict[str, Any] = field(default_factory=dict)  # config values for this style


_TINY = ("configuration_tiny.py", "tiny_layers.py")
_DECODER = {"num_key_value_heads": 2}
_ENCODER = {"AutoModel": "TinyEncoderModel", "AutoModelForSequenceClassification": (
    "TinyEncoderForSequenceClassification")}  # fmt: skip

STYLES: dict[str, Style] = {
    "no-cache": Style(
        "configuration_tiny", "TinyConfig", "modeling_nocache",
        {"AutoModelForCausalLM": "NoCacheForCausalLM"}, "NoCacheForCausalLM",
        (*_TINY, "modeling_nocache.py"), _DECODER,
    ),
    "tuple-cache": Style(
        "configuration_tiny", "TinyConfig", "modeling_tuple_cache",
        {"AutoModelForCausalLM": "TupleForCausalLM"}, "TupleForCausalLM",
        (*_TINY, "modeling_tuple_cache.py"), _DECODER,
    ),
    "cache-api": Style(
        "configuration_tiny", "TinyConfig", "modeling_cache_api",
        {"AutoModelForCausalLM": "CacheForCausalLM"}, "CacheForCausalLM",
        (*_TINY, "modeling_cache_api.py"), _DECODER,
    ),
    "llama-fork": Style(
        "configuration_llama_fork", "LlamaForkConfig", "modeling_llama_fork",
        {"AutoModel": "LlamaForkModel", "AutoModelForCausalLM": "LlamaForkForCausalLM"},
        "LlamaForkForCausalLM",
        ("configuration_llama_fork.py", "modeling_llama_fork.py"),
        {"num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 128,
         "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "logit_scale": 0.5, "attention_bias": True},
    ),
    "feature-extraction": Style(
        "configuration_tiny", "TinyConfig", "modeling_encoder", _ENCODER, "TinyEncoderModel",
        (*_TINY, "modeling_encoder.py"),
    ),
    "text-classification": Style(
        "configuration_tiny", "TinyConfig", "modeling_encoder", _ENCODER,
        "TinyEncoderForSequenceClassification", (*_TINY, "modeling_encoder.py"),
        {"num_labels": 3},
    ),
}  # fmt: skip


def _class(module: str, name: str) -> type:
    return getattr(importlib.import_module(f"{PACKAGE}.{module}"), name)


def write_checkpoint(
    directory: Path, style: str, *, seed: int = 0, **overrides: Any
) -> torch.nn.Module:
    """Write a checkpoint of ``style`` (a key of ``STYLES``) into ``directory``; ``overrides``
    go into its config (``attention="sdpa"``, say). Returns the model it saved, in eval mode
    (built from this package's copy of the code, not the checkpoint's)."""
    from safetensors.torch import save_file

    from mobius.testing.tiny import randomize

    chosen = STYLES[style]
    directory.mkdir(parents=True, exist_ok=True)
    for name in chosen.files:
        shutil.copyfile(MODELS / name, directory / name)
    values = {"bos_token_id": 0, "eos_token_id": 1, **chosen.config, **overrides}
    config = _class(chosen.config_module, chosen.config_class)(**values)
    auto_map = {"AutoConfig": f"{chosen.config_module}.{chosen.config_class}"}
    auto_map |= {auto: f"{chosen.model_module}.{cls}" for auto, cls in chosen.auto_map.items()}
    config.auto_map = auto_map
    config.architectures = [chosen.architecture]
    torch.manual_seed(seed)
    model = _class(chosen.model_module, chosen.architecture)(config).eval()
    randomize(model, seed)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
    config.save_pretrained(directory)
    return model


def load_reference(directory: Path, auto_class: Any) -> torch.nn.Module:
    """The checkpoint's own code for ``auto_class``, loaded by transformers as a dynamic module,
    with its weights.

    The class ``auto_map`` names is built from the config and filled from the safetensors:
    ``from_pretrained`` leaves buffers that hand-written code computes in ``__init__`` (rotary
    ``inv_freq``) uninitialised when the code has no ``_init_weights`` for them, and the auto
    classes' ``from_config`` keeps, per config class, the model class first registered for it
    (checkpoints sharing a configuration file would get each other's)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    config = AutoConfig.from_pretrained(directory, trust_remote_code=True)
    reference = config.auto_map[auto_class.__name__]
    model = get_class_from_dynamic_module(reference, str(directory))._from_config(config)
    missing, unexpected = model.load_state_dict(
        load_file(directory / "model.safetensors"), strict=False
    )
    persistent = set(model.state_dict())
    assert not unexpected and not [k for k in missing if k in persistent], (missing, unexpected)
    return model.eval()
