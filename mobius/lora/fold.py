"""Fold a LoRA adapter into the base weights while they are written: ``W + B @ A * scale``.

The binder (``mobius.output.weight_binder.WeightBinder``) asks ``folds`` for each parameter it binds to a
checkpoint tensor; an adapted one is loaded, the delta added in float32 and the sum cast to the
output dtype when the package is saved, one weight at a time, so no second copy of the model is
ever held. Quantization (``--precision``) reads the folded weight: fold first, then quantize.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mobius.lora.peft_adapter import AdapterError, LoraModule, PeftAdapter

Fold = Callable[[torch.Tensor], torch.Tensor]


class AdapterFold:
    """Attaches one adapter's folds to the binders of a build and checks every target is used."""

    def __init__(self, adapter: PeftAdapter) -> None:
        self.adapter = adapter
        # base parameter name -> what it comes from in the adapter (for messages)
        self.targets: dict[str, str] = {}
        self.folded: set[str] = set()

    def attach(self, binder) -> None:
        """Give ``binder`` (a ``WeightBinder`` over the base checkpoint) a fold for every
        parameter the adapter changes; refuses, naming the first, a target the base does not have,
        one whose shape differs, and one whose weight is tied or assembled from several tensors."""
        folds: dict[str, Fold] = {}
        for name, entry in self.adapter.replaced.items():
            param = _parameter(binder, name, name)
            _check_shape(binder, param, entry.shape, f"adapter tensor '{name}' (modules_to_save)")
            folds[param] = self._replacement(entry)
            self.targets[param] = name
        for module in self.adapter.modules.values():
            param = _parameter(binder, f"{module.path}.weight", module.path)
            expected = module.weight_shape(self.adapter.fan_in_fan_out)
            _check_shape(binder, param, expected, f"adapter module '{module.path}'")
            # an embedding saved with its LoRA (save_embedding_layers): replaced, then folded
            folds[param] = self._lora_fold(module, folds.get(param))
            self.targets[param] = module.path
        binder.folds = folds
        binder.on_fold = self.folded.add

    def check_used(self) -> None:
        """Refuse an adapter target that no graph of the build bound (the folds would be lost)."""
        for param, what in self.targets.items():
            if param not in self.folded:
                raise AdapterError(
                    f"the adapter changes '{what}', which no graph of this build uses; build the "
                    "task (or features) that includes it"
                )

    def to_json(self) -> dict:
        """``mobius.json``'s ``lora`` entry: what was folded, from which adapter."""
        config = self.adapter.config
        return {
            "mode": "folded",
            "adapter": self.adapter.name,
            "base_model_name_or_path": config.get("base_model_name_or_path"),
            "use_rslora": bool(config.get("use_rslora")),
            "modules": sorted(self.targets[p] for p in self.folded),
        }

    def _lora_fold(self, module: LoraModule, replace: Fold | None) -> Fold:
        adapter = self.adapter

        def fold(weight: torch.Tensor) -> torch.Tensor:
            base = replace(weight) if replace is not None else weight
            return base.float() + adapter.delta(module)

        return fold

    def _replacement(self, entry) -> Fold:
        adapter = self.adapter

        def replace(weight: torch.Tensor) -> torch.Tensor:
            return adapter.load(entry).to(weight.dtype)

        return replace


def _parameter(binder, name: str, what: str) -> str:
    """The base model's parameter for the adapter's ``name``: the same name, or the one
    transformers' load-time renaming gives it (an adapter saved against older module paths)."""
    if name in binder.param_to_key or name in binder.fused:
        param = name
    else:
        renamed = binder.mapping.rename(name)[0] if binder.mapping is not None else name
        if renamed not in binder.param_to_key and renamed not in binder.fused:
            raise AdapterError(
                f"the adapter targets '{what}', which the base model does not have "
                f"(no parameter '{name}'); the adapter is for another model"
            )
        param = renamed
    if param in binder.fused:
        raise AdapterError(
            f"the adapter targets '{what}', whose weight transformers assembles from several "
            "checkpoint tensors; folding into it is not supported"
        )
    tied = [t for t in binder.tied_names.get(param, [param]) if t != param]
    if tied:
        raise AdapterError(
            f"the adapter changes '{param}', which the base model ties to '{tied[0]}'; folding "
            "would change both (untie them, or leave that module out of the adapter)"
        )
    return param


def _check_shape(binder, param: str, expected: tuple[int, ...], what: str) -> None:
    key = binder.param_to_key[param]
    shape = tuple(binder.checkpoint.entries[key].shape)
    if shape != tuple(expected):
        raise AdapterError(
            f"{what} has the shape of a {list(expected)} weight but the base's '{key}' is "
            f"{list(shape)}; the adapter is for another model"
        )
