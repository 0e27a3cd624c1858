"""LoRA test support: seeded random adapters written in PEFT's on-disk format without PEFT (for
the malformed adapters the refusal tests edit), an ``.onnx_adapter``'s values as feeds, parity with
those feeds, and a float checkpoint of a model loaded from GGUF. Adapters made by PEFT itself and
``PeftModel`` as the reference are ``mobius.testing.peft_adapters``."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

PREFIX = "base_model.model."


def write_adapter(
    model: torch.nn.Module,
    directory: Path,
    targets: list[str],
    *,
    r: int = 4,
    alpha: float = 8.0,
    seed: int = 0,
    use_rslora: bool = False,
    fan_in_fan_out: bool = False,
    modules_to_save: list[str] | None = None,
    std: float = 0.2,
    rank_pattern: dict[str, int] | None = None,
    **config: object,
) -> Path:
    """A PEFT LoRA adapter for every linear (or embedding) of ``model`` whose path ends with one
    of ``targets``; ``lora_A`` and ``lora_B`` both seeded random (``lora_B`` is not zero).
    ``modules_to_save`` tensors are the base's plus seeded noise; ``rank_pattern``: module name
    -> its own rank. Returns ``directory``."""
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    rank = r
    tensors: dict[str, torch.Tensor] = {}
    for path, module in model.named_modules():
        if not any(path == t or path.endswith("." + t) for t in targets):
            continue
        weight = module.weight
        r = next((v for k, v in (rank_pattern or {}).items() if path.endswith("." + k)), rank)
        if isinstance(module, torch.nn.Embedding):
            num, dim = weight.shape
            tensors[f"{PREFIX}{path}.lora_embedding_A"] = torch.randn(r, num, generator=gen) * std
            tensors[f"{PREFIX}{path}.lora_embedding_B"] = torch.randn(dim, r, generator=gen) * std
            continue
        out, rows = weight.shape[::-1] if fan_in_fan_out else weight.shape
        tensors[f"{PREFIX}{path}.lora_A.weight"] = torch.randn(r, rows, generator=gen) * std
        tensors[f"{PREFIX}{path}.lora_B.weight"] = torch.randn(out, r, generator=gen) * std
    assert tensors, f"no module of the model ends with any of {targets}"
    for path in modules_to_save or []:
        module = model.get_submodule(path)
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=gen) * std
            tensors[f"{PREFIX}{path}.{name}"] = (param.detach().float() + noise).contiguous()
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    settings = {
        "peft_type": "LORA",
        "r": rank,
        "rank_pattern": rank_pattern or {},
        "lora_alpha": alpha,
        "target_modules": targets,
        "use_rslora": use_rslora,
        "use_dora": False,
        "fan_in_fan_out": fan_in_fan_out,
        "modules_to_save": modules_to_save,
        "base_model_name_or_path": "tiny",
        "task_type": "CAUSAL_LM",
        "bias": "none",
        **config,
    }
    (directory / "adapter_config.json").write_text(json.dumps(settings, indent=2))
    return directory


def onnx_adapter_feeds(path: Path) -> dict:
    """The parameters of an ``.onnx_adapter`` file as numpy feeds, by input name."""
    import onnxruntime as ort

    adapter = ort.AdapterFormat.read_adapter(str(path))
    # copies: the arrays would point into the adapter's buffer, freed with it
    return {name: value.numpy().copy() for name, value in adapter.get_parameters().items()}


def lora_parity(
    model: torch.nn.Module, directory: Path, config, extra: dict, prefill: int = 6, length: int = 9
) -> dict:
    """``causal_lm_parity`` with ``extra`` feeds (an adapter's LoRA inputs) on every call."""
    from unittest import mock

    from mobius.runtime.causal_lm import OnnxCausalLM
    from mobius.testing.parity import causal_lm_parity

    run = OnnxCausalLM.run

    def with_extra(self, ids, mask, positions, cache):
        return run(self, ids, mask, positions, {**cache, **extra})

    with mock.patch.object(OnnxCausalLM, "run", with_extra):
        return causal_lm_parity(model, directory, config, prefill=prefill, length=length)


class SessionWithFeeds:
    """An onnxruntime session that adds ``extra`` feeds (an adapter's LoRA inputs) to every run,
    for the parity helpers that take a session (``contract_pairs``)."""

    def __init__(self, session, extra: dict) -> None:
        self._session, self._extra = session, extra

    def __getattr__(self, name: str):
        return getattr(self._session, name)

    def run(self, output_names, feeds: dict, *args):
        return self._session.run(output_names, {**feeds, **self._extra}, *args)


def save_float_checkpoint(model: torch.nn.Module, directory: Path) -> Path:
    """``model``'s config and float32 weights as a safetensors checkpoint, also for a model
    transformers will not save (one loaded from a GGUF file); tied copies left out."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(directory)
    seen: set[int] = set()
    tensors = {}
    for name, tensor in model.state_dict().items():
        if id(tensor) in seen or tensor.data_ptr() in seen:
            continue
        seen.update((id(tensor), tensor.data_ptr()))
        tensors[name] = tensor.detach().float().contiguous()
    save_file(tensors, str(directory / "model.safetensors"))
    return directory
