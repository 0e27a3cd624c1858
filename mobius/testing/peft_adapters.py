"""LoRA adapters made and saved by PEFT itself, and PEFT's ``PeftModel`` as the reference (for
the tests and the benchmarks; PEFT comes with the ``testing`` extras).

``peft_adapter`` wraps a copy of an HF model with ``get_peft_model(LoraConfig(...))``, fills every
LoRA factor (``lora_B`` too, which PEFT starts at zero) and every ``modules_to_save`` copy with
seeded noise, and writes the directory with ``save_pretrained``; ``peft_model`` loads it back onto
another copy with ``PeftModel.from_pretrained``, as a user of the adapter does. The ONNX model is
compared with that model's unmerged forward (``y + lora_B(lora_A(x)) * scale``).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path

import torch


def peft_adapter(
    model: torch.nn.Module, directory: Path, *, seed: int, std: float = 0.2, **lora: object
) -> Path:
    """Save a seeded random PEFT LoRA adapter for ``model`` (``lora``: ``LoraConfig`` fields:
    ``target_modules``, ``r``, ``lora_alpha``, ``rank_pattern``, ``use_rslora``...) in
    ``directory``; returns it."""
    from peft import LoraConfig, get_peft_model

    wrapped = get_peft_model(copy.deepcopy(model), LoraConfig(**lora))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            if ".lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * std)
            elif ".modules_to_save." in name:
                param.add_(torch.randn(param.shape, generator=gen) * std)
    wrapped.save_pretrained(directory)
    return directory


def peft_model(model: torch.nn.Module, directory: Path) -> torch.nn.Module:
    """A copy of ``model`` with the adapter in ``directory`` loaded by PEFT (unmerged), in eval
    mode."""
    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(model), directory).eval()


class PeftAdapters:
    """One copy of ``model`` with several adapters loaded by PEFT, switched as a server switches
    them: ``use(name)`` makes one active (``set_adapter``), ``use(None)`` none
    (``disable_adapter``)."""

    def __init__(self, model: torch.nn.Module, adapters: dict[str, Path]) -> None:
        from peft import PeftModel

        names = list(adapters)
        self.model = PeftModel.from_pretrained(
            copy.deepcopy(model), adapters[names[0]], adapter_name=names[0]
        )
        for name in names[1:]:
            self.model.load_adapter(adapters[name], adapter_name=name)
        self.model.eval()

    @contextlib.contextmanager
    def use(self, name: str | None) -> Iterator[torch.nn.Module]:
        """The PEFT model with adapter ``name`` active (None: the base model)."""
        if name is None:
            with self.model.disable_adapter():
                yield self.model
        else:
            self.model.set_adapter(name)
            yield self.model


def greedy(model: torch.nn.Module, ids: list[int], new: int) -> list[int]:
    """HF greedy tokens of ``model`` (a ``PeftModel`` too): the prompt and ``new`` more."""
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([ids]), max_length=len(ids) + new, do_sample=False
        )
    return out[0].tolist()
