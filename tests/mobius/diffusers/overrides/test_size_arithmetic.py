"""Overrides that compute from tensor sizes what a model computes in Python arithmetic on them
(``mobius/diffusers/overrides/``): EasyAnimate's rotary crop, Bria FIBO 2's gist-token counts,
MiniMax Music 3's resampled length (checked in the graph against the model's float formula)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def _model(label: str) -> torch.nn.Module:
    import diffusers

    _, name, kwargs = next(c for c in ALL_CONFIGS if c[0] == label)
    return randomize_scaled(getattr(diffusers, name)(**kwargs), 0).eval()


def test_easyanimate_crop_matches_the_model_table():
    """Both aspect-ratio branches, rounding half to even, one-patch sides (linspace of one),
    and 36x9 and 36x33 patches, where `30 / h` as a reciprocal rounds the resized side off."""
    from diffusers.models.transformers.transformer_easyanimate import EasyAnimateRotaryPosEmbed

    from mobius.diffusers.overrides.easyanimate import crop_from_sizes

    original, override = EasyAnimateRotaryPosEmbed(2, 32), EasyAnimateRotaryPosEmbed(2, 32)
    crop_from_sizes(override)
    grids = [(rows, cols) for rows in range(1, 13) for cols in range(1, 13)]
    for rows, cols in [*grids, (36, 9), (36, 33)]:
        x = torch.zeros(1, 1, 2, 2 * rows, 2 * cols)
        for want, got in zip(original(x), override(x), strict=True):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_easyanimate_converts_with_dynamic_sizes(tmp_path):
    model, out = convert("EasyAnimateTransformer3DModel", tmp_path)
    diffs = max_diffs(model, out)
    assert len(diffs) == 2
    assert max(diffs.values()) < ATOL, diffs


def test_bria_fibo2_gist_counts_and_masked_slots():
    """The counts equal compute_gist_count at every length; the masked slots change nothing
    (prompts of equal and of different gist counts in one batch)."""
    from diffusers.models.transformers.transformer_bria_fibo2 import compute_gist_count

    from mobius.diffusers.overrides.bria_fibo2 import gist_counts, gist_slots_by_mask

    original = _model("BriaFibo2Transformer2DModel")
    cfg = original.config
    lengths = torch.arange(0, 100)
    want = compute_gist_count(lengths.tolist(), cfg.min_num_gist_tokens, cfg.max_num_gist_tokens,
                              cfg.gist_step, cfg.gist_min_text_len, cfg.gist_max_text_len)  # fmt: skip
    assert gist_counts(lengths, cfg).tolist() == want
    override = _model("BriaFibo2Transformer2DModel")
    gist_slots_by_mask(override)
    gen = torch.Generator().manual_seed(0)
    for valid in ([7, 7], [3, 7]):
        x, t = torch.randn(2, 4, 8, 8, generator=gen), torch.rand(2, generator=gen)
        text = torch.randn(2, 2, 7, 12, generator=gen)
        mask = torch.arange(7)[None] < torch.tensor(valid)[:, None]
        with torch.no_grad():
            want, got = original(x, t, text, mask).sample, override(x, t, text, mask).sample
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_minimax_length_stops_where_the_float_formula_differs(tmp_path):
    model, out = convert("MiniMaxMusic3ConditionEncoder", tmp_path)
    diffs = max_diffs(model, out)
    assert max(diffs.values()) < ATOL, diffs
    session = ort.InferenceSession(str(out / "model.onnx"))
    width = model.config.num_condition_layers * model.config.condition_hidden_dim
    x = torch.randn(1, 9343, width)
    got = session.run(None, {"hidden_states": x.numpy()})[0]
    with torch.no_grad():
        want = model(x).numpy()
    assert got.shape == want.shape
    assert float(np.abs(got - want).max()) < ATOL
    # 9344 frames: int(9344 * 44100 / 24000 * 960 / 512) = 32192, the exact floor 32193
    with pytest.raises(Exception, match="(?i)indices|out of"):
        session.run(None, {"hidden_states": np.zeros((1, 9344, width), np.float32)})
