"""Compare a converted model, run by onnxruntime, with the HF model in eager PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def session(directory: Path):
    import onnxruntime as ort

    return ort.InferenceSession(str(Path(directory) / "model.onnx"), providers=["CPUExecutionProvider"])


def decoder_inputs(vocab_size: int, batch: int = 2, length: int = 7, pad: int = 3, seed: int = 1) -> dict[str, torch.Tensor]:
    """Token ids with the first row left-padded by ``pad`` positions, and matching position ids."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, :pad] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


def encoder_inputs(vocab_size: int, names: list[str], batch: int = 2, length: int = 7, seed: int = 1) -> dict[str, torch.Tensor]:
    """Token ids with right padding in the first row (how encoders are batched), plus token types."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, -2:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        types = torch.zeros_like(ids)
        types[:, length // 2 :] = 1
        feeds["token_type_ids"] = types
    return feeds


def max_abs_diff(model: torch.nn.Module, directory: Path, config) -> float:
    """Largest |onnxruntime - torch| over the positions that carry real tokens (or all, for vision)."""
    sess = session(directory)
    names = [i.name for i in sess.get_inputs()]
    if "pixel_values" in names:
        gen = torch.Generator().manual_seed(1)
        feeds = {"pixel_values": torch.randn(2, config.num_channels, config.image_size, config.image_size, generator=gen)}
        keep = None
    elif "position_ids" in names:
        feeds = decoder_inputs(config.vocab_size)
        keep = feeds["attention_mask"].bool().numpy()
    else:
        feeds = encoder_inputs(config.vocab_size, names)
        keep = feeds["attention_mask"].bool().numpy()
    with torch.no_grad():
        out = model(**feeds)
    expected = (out.logits if hasattr(out, "logits") and "position_ids" in names else out.last_hidden_state).numpy()
    actual = sess.run(None, {k: v.numpy() for k, v in feeds.items()})[0]
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    diff = np.abs(actual - expected)
    return float(diff[keep].max() if keep is not None else diff.max())
