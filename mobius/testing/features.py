"""For the build-feature tests: a saved build loaded back as a package, and one tiny
converted model with its HF reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import torch

import mobius
from mobius.features import apply_features
from mobius.output.package import ModelPackage

COMPANIONS = ("mobius.json", "genai_config.json")


def load_package(directory: Path) -> ModelPackage:
    """A saved build as a package again: its graph and the texts written beside it."""
    texts = {n: (directory / n).read_text() for n in COMPANIONS if (directory / n).is_file()}
    return ModelPackage(model=ir.load(directory / "model.onnx"), texts=texts)


class Converted:
    def __init__(self, root: Path, checkpoint: Path, hf) -> None:
        self.root, self.checkpoint, self.hf = root, checkpoint, hf
        self.base = mobius.build(checkpoint).save(root / "base")

    def with_features(self, *features: str, **options) -> Path:
        """The base graph with ``features`` applied, saved in a directory of its own (once)."""
        target = self.root / "-".join(features + tuple(map(str, options.values())))
        if not target.is_dir():
            apply_features(load_package(self.base), features, **options).save(target)
        return target

    def batch(self, length: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, mask, positions): batch 2, the second row left-padded by 3 tokens."""
        ids = np.random.default_rng(0).integers(4, self.hf.config.vocab_size, (2, length))
        mask = np.ones((2, length), np.int64)
        mask[1, :3] = 0
        return ids, mask, np.clip(mask.cumsum(-1) - 1, 0, None)

    def hf_logits(self, ids, mask, positions) -> np.ndarray:
        with torch.no_grad():
            out = self.hf(
                input_ids=torch.tensor(ids),
                attention_mask=torch.tensor(mask),
                position_ids=torch.tensor(positions),
            )
        return out.logits.numpy()
