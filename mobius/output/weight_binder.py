"""Bind each parameter, buffer and constant placeholder of a traced graph to an initializer:
streamed from its checkpoint tensor, assembled by a transformers converter, or held in memory
(a buffer computed at init)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import onnx_ir as ir
import torch
from onnx_ir.tensor_adapters import TorchTensor
from torch.export.graph_signature import InputKind

from lowering.dtypes import onnx_dtype
from mobius import failures
from mobius.errors import WeightsError
from mobius.output.weights import Checkpoint, held_initializer, lazy_initializer
from mobius.sources.key_mapping import KeyMapping


def _check_dtype(key: str, file: Path, stored: torch.dtype, name: str, wanted: torch.dtype) -> None:
    """A float parameter must come from a float tensor (and an integer one from an integer)."""
    if stored.is_floating_point != wanted.is_floating_point:
        kind = "a floating-point" if wanted.is_floating_point else "an integer"
        raise WeightsError(
            f"tensor '{key}' in {file.name} is stored as {str(stored).removeprefix('torch.')} but "
            f"{name} is {kind} tensor; the checkpoint is corrupt or not for this model"
        )


class WeightBinder:
    """Turns each parameter/buffer/constant placeholder of the traced graph into an initializer."""

    def __init__(
        self,
        checkpoint: Checkpoint | None,
        *,
        buffer_values: dict[str, torch.Tensor],
        tied_names: dict[str, list[str]],
        key_to_param: KeyMapping | None,
        constants: dict[str, torch.Tensor],
    ) -> None:
        self.checkpoint = checkpoint
        self.buffer_values = buffer_values
        self.tied_names = tied_names
        self.constants = constants
        self.mapping = key_to_param
        self.param_to_key: dict[str, str] = {}
        # params that transformers builds from several keys: name -> source pattern -> keys
        self.converted: dict[str, dict[str, list[str]]] = {}
        for key in checkpoint.entries if checkpoint is not None else ():
            param, pattern = key_to_param.rename(key) if key_to_param is not None else (key, None)
            if pattern is None:
                self.param_to_key.setdefault(param, key)
            else:
                self.converted.setdefault(param, {}).setdefault(pattern, []).append(key)
        # every parameter a converter fills -> the group (first target) its source keys renamed to
        self.fused: dict[str, str] = {
            target: group
            for group, by_pattern in self.converted.items()
            for target in key_to_param.targets(group, set(by_pattern))
        }
        self.used_keys: set[str] = set()
        self._bound: dict[str, ir.Value] = {}
        # parameter -> its folded value from the loaded weight (mobius.lora.fold: W + B·A·scale)
        self.folds: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {}
        self.on_fold: Callable[[str], None] = lambda name: None

    def checkpoint_key(self, name: str) -> str | None:
        """The checkpoint key holding parameter ``name`` (through tying and transformers' renamings)."""
        for candidate in self.tied_names.get(name, [name]):
            if candidate in self.param_to_key:
                return self.param_to_key[candidate]
        return None

    def __call__(self, kind: InputKind, name: str, val: torch.Tensor, persistent: bool) -> ir.Value:
        if kind in (InputKind.PARAMETER, InputKind.BUFFER) and persistent:
            key = self.checkpoint_key(name)
            if key is not None:
                return self._from_checkpoint(key, name, val)
            fused = next((c for c in self.tied_names.get(name, [name]) if c in self.fused), None)
            if fused is not None:
                return self._assembled(fused, val)
            if kind == InputKind.PARAMETER and name not in self.buffer_values:
                return self._missing_parameter(name, val)  # (else: computed, not saved)
        return self._from_init(name, val)

    def _from_checkpoint(self, key: str, name: str, val: torch.Tensor) -> ir.Value:
        if key in self._bound:
            return self._bound[key]
        entry = self.checkpoint.entries[key]
        expected = tuple(int(s) for s in val.shape)
        if entry.shape != expected:
            raise WeightsError(
                f"tensor '{key}' in {entry.file.name} has shape {list(entry.shape)} but config.json implies "
                f"{list(expected)} for {name}; the weights and the config do not belong together"
            )
        _check_dtype(key, entry.file, entry.dtype, name, val.dtype)
        checkpoint, fold = self.checkpoint, self.folds.get(name)
        if fold is None:
            # a partial of the bound method, not a closure: a graph-cache recipe of it names
            # only the checkpoint (a closure would import this module, and torch, on a warm build)
            read = functools.partial(checkpoint.load, key)
            value = lazy_initializer(key, val.dtype, expected, read, copy_from=entry)
        else:  # computed when written, like any other weight; never streamed as the file's bytes
            value = lazy_initializer(key, val.dtype, expected, lambda: fold(checkpoint.load(key)))
            value.const_value.metadata_props["mobius.lora"] = "folded"
            self.on_fold(name)
        value.const_value.metadata_props["mobius.source_key"] = key
        self.used_keys.add(key)
        self._bound[key] = value
        return value

    def _assembled(self, name: str, val: torch.Tensor) -> ir.Value:
        """A parameter made from checkpoint tensors by a converter (stacked experts, a split q/k/v)."""
        if name in self._bound:
            return self._bound[name]
        group = self.fused[name]
        by_pattern = {
            p: sorted(keys, key=_natural_key) for p, keys in self.converted[group].items()
        }
        for key in (k for ks in by_pattern.values() for k in ks):
            entry = self.checkpoint.entries[key]
            _check_dtype(key, entry.file, entry.dtype, name, val.dtype)
        checkpoint, mapping = self.checkpoint, self.mapping
        expected = tuple(int(s) for s in val.shape)

        def assemble(load_key: Callable[[str], torch.Tensor]) -> dict[str, torch.Tensor]:
            tensors = {p: [load_key(k) for k in keys] for p, keys in by_pattern.items()}
            try:
                return mapping.assemble(group, tensors)
            except (RuntimeError, ValueError, IndexError, TypeError) as exc:  # e.g. an expert short
                failures.raise_if_fatal(exc)  # an interrupt torch turned into a TypeError stops
                n = sum(len(keys) for keys in by_pattern.values())
                raise WeightsError(
                    f"cannot assemble '{name}' from its {n} checkpoint tensors "
                    f"({str(exc).splitlines()[0]}); a tensor is missing or has the wrong shape, "
                    "the weights and the config do not belong together"
                ) from None

        # on meta first: shapes that do not fit are refused now, before anything is written
        def on_meta(key: str) -> torch.Tensor:
            entry = checkpoint.entries[key]
            return torch.empty(entry.shape, dtype=entry.dtype, device="meta")

        try:
            shapes = {k: tuple(v.shape) for k, v in assemble(on_meta).items()}
        except WeightsError as exc:
            if "meta" in str(exc.__context__ or exc):  # a converter that needs values: check later
                shapes = {}
            else:
                raise
        if name in shapes and shapes[name] != expected:
            raise WeightsError(
                f"'{name}' assembled to shape {list(shapes[name])}, config.json implies {list(expected)}"
            )

        def load() -> torch.Tensor:
            made = assemble(checkpoint.load)
            if name not in made:
                raise WeightsError(
                    f"could not assemble '{name}' from the checkpoint (converter gave {list(made)})"
                )
            tensor = made[name]
            if tuple(tensor.shape) != expected:
                raise WeightsError(
                    f"'{name}' assembled to shape {list(tensor.shape)}, config.json implies {list(expected)}"
                )
            return tensor

        # transformers' converter objects are shared by every parameter they assemble
        value = lazy_initializer(name, val.dtype, expected, load, parallel_safe=False)
        keys = [k for ks in by_pattern.values() for k in ks]
        value.const_value.metadata_props["mobius.source_keys"] = ",".join(keys)
        self.used_keys.update(keys)
        self._bound[name] = value
        return value

    def _missing_parameter(self, name: str, val: torch.Tensor) -> ir.Value:
        if self.checkpoint is not None:
            raise WeightsError(
                f"the checkpoint has no tensor for parameter '{name}'; it does not match config.json "
                "(or was saved by an incompatible library version)"
            )
        # graph-only build: weights become named graph inputs so the model can still be inspected
        shape = ir.Shape([int(s) for s in val.shape])
        return ir.Value(name=name, type=ir.TensorType(onnx_dtype(val.dtype)), shape=shape)

    def _from_init(self, name: str, val: torch.Tensor) -> ir.Value:
        if name in self._bound:
            return self._bound[name]
        real = self.buffer_values.get(name)
        if real is None:
            real = self.constants.get(name)
        if real is None or real.device.type == "meta":
            raise WeightsError(
                f"'{name}' is created inside forward() and has no value on the meta device; "
                "mobius cannot recover it yet"
            )
        # held as numpy: a graph-cache recipe of it, and its write, need no torch
        array = TorchTensor(real.to(val.dtype).contiguous()).numpy()
        value = held_initializer(name, array, onnx_dtype(val.dtype))
        self._bound[name] = value
        return value

    def unused_keys(self) -> list[str]:
        if self.checkpoint is None:
            return []
        return sorted(set(self.checkpoint.entries) - self.used_keys)


def _natural_key(key: str) -> list:
    """Sort 'experts.10' after 'experts.9'."""
    return [int(part) if part.isdigit() else part for part in key.split(".")]
