"""Inputs the user gives ``mobius verify`` (a prompt, an image, an audio file), made into the
batches of two the task families feed: the given input, and a shorter (or mirrored) second row
so that padding is exercised."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mobius.errors import ConfigError


@dataclass(frozen=True)
class Given:
    """What the user passed; None where the family's random inputs are used."""

    prompt: str | None = None
    image: Path | None = None
    audio: Path | None = None

    def describe(self) -> str:
        parts = []
        if self.prompt is not None:
            parts.append(f"prompt {self.prompt!r}")
        if self.image is not None:
            parts.append(f"image {self.image.name}")
        if self.audio is not None:
            parts.append(f"audio {self.audio.name}")
        return ", ".join(parts)


def _from_pretrained(kind: str, folders: list[Path]) -> Any:
    """The first of ``folders`` that has a ``kind`` (``AutoTokenizer``, ``AutoProcessor``, ...)."""
    import transformers

    auto = getattr(transformers, kind)
    for folder in folders:
        try:
            return auto.from_pretrained(folder)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    raise ConfigError(
        f"no {kind[4:].lower()} found in {', '.join(str(f) for f in folders)}; --prompt, --image "
        "and --audio need the checkpoint's tokenizer and processor files"
    )


def tokenizer(*folders: Path) -> Any:
    return _from_pretrained("AutoTokenizer", list(folders))


def processor(*folders: Path) -> Any:
    return _from_pretrained("AutoProcessor", list(folders))


def image_processor(*folders: Path) -> Any:
    return _from_pretrained("AutoImageProcessor", list(folders))


def feature_extractor(*folders: Path) -> Any:
    return _from_pretrained("AutoFeatureExtractor", list(folders))


def prompt_ids(tok: Any, prompt: str) -> list[int]:
    ids = tok(prompt)["input_ids"]
    if len(ids) < 2:
        raise ConfigError(f"--prompt {prompt!r} is {len(ids)} token; give at least two")
    return list(ids)


def left_padded(ids: list[int], pad: int, shorter_by: int = 3) -> dict[str, torch.Tensor]:
    """The causal-LM batch: the prompt, and the prompt without its last ``shorter_by`` tokens
    left-padded to the same width; with the contract's ``position_ids``."""
    cut = min(shorter_by, len(ids) - 1)
    short = ids[: len(ids) - cut]
    rows = torch.tensor([ids, [pad] * cut + short])
    mask = torch.ones_like(rows)
    mask[1, :cut] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": rows, "attention_mask": mask, "position_ids": positions}


def right_padded(tok: Any, prompt: str) -> dict[str, torch.Tensor]:
    """The encoder batch: the prompt, and its first half of the words right-padded."""
    words = prompt.split()
    second = " ".join(words[: max(1, len(words) // 2)])
    tok.padding_side = "right"
    encoded = tok([prompt, second], padding=True, return_tensors="pt")
    return {k: v for k, v in encoded.items() if isinstance(v, torch.Tensor)}


def load_image(path: Path) -> Any:
    """The image at ``path`` as RGB (PIL)."""
    try:
        from PIL import Image

        with Image.open(path) as image:
            return image.convert("RGB")
    except ImportError:
        raise ConfigError("--image needs Pillow: pip install pillow") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the image {path}: {exc}") from None
