"""transformers' load-time mapping from checkpoint keys to parameters (renames and fused tensors),
replayed by the weight binder without loading the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mobius.errors import WeightsError


@dataclass
class KeyMapping:
    """transformers' mapping from checkpoint keys to parameters, renames and fused tensors alike."""

    model: Any  # the meta model: some fusing operations read target shapes from it
    renamings: list
    converters: list
    meta_state: dict

    def rename(self, key: str) -> tuple[str, str | None]:
        """(parameter name, the converter source pattern that matched, or None for a plain rename).

        As transformers' loader does, a key whose renamed form is no parameter but whose own name
        is one keeps its name: a broad renaming (``.norm.`` to ``.kv_norm.``) must not capture a
        key it was not written for (``model.norm.weight``).
        """
        from transformers.core_model_loading import rename_source_key

        prefix = getattr(self.model, "base_model_prefix", None)
        param, pattern = rename_source_key(
            key, self.renamings, self.converters, prefix, self.meta_state
        )
        if param not in self.meta_state:
            plain, _ = rename_source_key(key, [], [], prefix, self.meta_state)
            if plain in self.meta_state:
                return plain, None
            # transformers' original-format writer nests a text model held as ``language_model``
            # one level deeper (ShieldGemma 2: ``model.language_model.model.*``), which its own
            # loader does not read back; the parameter is the key without that level
            unnested = key.replace("language_model.model.", "language_model.", 1)
            if unnested != key:
                again = self.rename(unnested)
                if again[0] in self.meta_state:
                    return again
        return param, pattern

    def targets(self, group: str, patterns: set[str]) -> list[str]:
        """The parameters one converter fills: ``group`` (its first target, the name every source
        key renames to) and, for a split (one fused tensor into q/k/v), the sibling targets."""
        converter = self._converter(patterns)
        first = converter.target_patterns[0]
        if len(converter.target_patterns) == 1 or first not in group:
            return [group]
        head, _, tail = group.partition(first)
        return [head + target + tail for target in converter.target_patterns]

    def assemble(
        self, group: str, by_pattern: dict[str, list[torch.Tensor]]
    ) -> dict[str, torch.Tensor]:
        """Run the converter whose source patterns produced ``by_pattern`` (stack experts, split a
        fused projection); every tensor it makes, by full parameter name."""
        converter = self._converter(set(by_pattern))
        tensors: dict[str, Any] = dict(by_pattern)
        for op in converter.operations:
            tensors = op.convert(
                tensors,
                source_patterns=list(converter.source_patterns),
                target_patterns=list(converter.target_patterns),
                full_layer_name=group,
                model=self.model,
                config=self.model.config,
                missing_keys=set(),
            )
        tensors = {k: v[0] if isinstance(v, list) else v for k, v in tensors.items()}
        full = group.replace("*.", "0.")
        hit = next((k for k in tensors if k in full), None)
        if hit is not None:  # outputs are named by target pattern: add the group's prefix/suffix
            head, _, tail = full.partition(hit)
            return {head + k + tail: v for k, v in tensors.items()}
        if len(tensors) == 1:
            return {group: next(iter(tensors.values()))}
        raise WeightsError(
            f"could not assemble '{group}' from the checkpoint (converter gave {list(tensors)})"
        )

    def _converter(self, patterns: set[str]):
        return next(c for c in self.converters if patterns <= set(c.source_patterns))
