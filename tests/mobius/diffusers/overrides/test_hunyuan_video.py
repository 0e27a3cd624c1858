"""HunyuanVideo overrides (``mobius/diffusers/overrides/hunyuan_video15.py``): prompt tokens
ordered valid-first by a 0/1 matrix instead of a Python loop over boolean selections, and the
text-to-video branch on all-zero ``image_embeds`` computed in the graph."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.mobius.diffusers.parity import ATOL, convert


def _padding(lengths: list[int], total: int) -> torch.Tensor:
    """A right-padded mask: row ``i`` has ``lengths[i]`` valid tokens of ``total``."""
    return torch.arange(total)[None, :] < torch.tensor(lengths)[:, None]


@pytest.fixture(scope="module")
def hunyuan_video15(tmp_path_factory):
    model, out = convert("HunyuanVideo15Transformer3DModel", tmp_path_factory.mktemp("hv15"))
    return model, ort.InferenceSession(str(out / "model.onnx"))


@pytest.mark.parametrize(
    ("sizes", "text_to_video"),
    [((3, 9, 4, 6, 6, 5), False), ((3, 5, 8, 4, 7, 3), True), ((1, 2, 6, 8, 4, 2), False)],
)
def test_hunyuan_video15_padded_prompts(hunyuan_video15, sizes, text_to_video):
    """Rows of different valid lengths in both prompts (one row fully padded in the ByT5
    prompt), image tokens or the text-to-video zeros, at sizes other than the trace's."""
    model, session = hunyuan_video15
    batch, frames, height, width, length, image_tokens = sizes
    cfg = model.config
    gen = torch.Generator().manual_seed(0)
    lengths = [length, 1, length - 2][:batch]
    inputs = {
        "hidden_states": torch.randn(batch, cfg.in_channels, frames, height, width, generator=gen),
        "timestep": torch.rand(batch, generator=gen) * 900 + 10,
        "encoder_hidden_states": torch.randn(batch, length, cfg.text_embed_dim, generator=gen),
        "encoder_attention_mask": _padding(lengths, length),
        "encoder_hidden_states_2": torch.randn(
            batch, length + 3, cfg.text_embed_2_dim, generator=gen
        ),
        "encoder_attention_mask_2": _padding([2, length + 3, 0][:batch], length + 3),
        "image_embeds": torch.randn(batch, image_tokens, cfg.image_embed_dim, generator=gen),
    }
    if text_to_video:
        inputs["image_embeds"] = torch.zeros_like(inputs["image_embeds"])
    named = {d for i in session.get_inputs() for d in i.shape if isinstance(d, str)}
    assert named == {"batch", "num_frames", "height", "width", "sequence_length",
                     "sequence_length_2", "image_sequence_length"}  # fmt: skip
    with torch.no_grad():
        expected = model(**inputs).sample.numpy()
    (got,) = session.run(None, {k: v.numpy() for k, v in inputs.items()})
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() < ATOL


def test_hunyuan_video15_vae_causal_mask_equals_the_loop():
    """The frame comparison allows exactly the entries the model's loop sets to 0."""
    from diffusers.models.autoencoders.autoencoder_kl_hunyuanvideo15 import (
        HunyuanVideo15AttnBlock,
    )

    from mobius.diffusers.overrides.hunyuan_video15 import causal_mask_by_frames

    block = HunyuanVideo15AttnBlock(4)
    causal_mask_by_frames(block)
    for frames, pixels in [(1, 6), (3, 4), (5, 1), (2, 9)]:
        want = HunyuanVideo15AttnBlock.prepare_causal_attention_mask(
            frames, pixels, torch.float32, "cpu"
        )
        got = block.prepare_causal_attention_mask(frames, pixels, torch.float32, "cpu")
        assert torch.equal(got, want == 0)


def test_framepack_mask_equals_the_cut_prompt():
    """At batch 1 the model cuts the prompt to its length, at batch 3 it masks row by row: the
    override's one mask gives the same at both (PyTorch, every parameter random)."""
    import diffusers

    from mobius.diffusers.overrides.hunyuan_video_framepack import prompt_mask_at_every_batch
    from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled

    label = "HunyuanVideoFramepackTransformer3DModel"
    kwargs = next(c[2] for c in ALL_CONFIGS if c[0] == label)
    model = randomize_scaled(getattr(diffusers, label)(**kwargs), 0).eval()
    override = randomize_scaled(getattr(diffusers, label)(**kwargs), 0).eval()
    prompt_mask_at_every_batch(override)
    gen = torch.Generator().manual_seed(0)
    for batch, frames, height, width, lengths in [(1, 3, 12, 10, [2]), (3, 2, 8, 16, [6, 1, 4])]:

        def rand(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=gen)

        inputs = {
            "hidden_states": rand(batch, 4, frames, height, width),
            "timestep": torch.rand(batch, generator=gen) * 900 + 10,
            "encoder_hidden_states": rand(batch, 6, 12),
            "encoder_attention_mask": _padding(lengths, 6),
            "pooled_projections": rand(batch, 10),
            "image_embeds": rand(batch, 3, 14),
            "indices_latents": torch.arange(3, 3 + frames),
            "guidance": torch.rand(batch, generator=gen) * 5,
            "latents_clean": rand(batch, 4, 2, height, width),
            "indices_latents_clean": torch.tensor([0, 3 + frames]),
            "latents_history_2x": rand(batch, 4, 2, height, width),
            "indices_latents_history_2x": torch.tensor([4 + frames, 5 + frames]),
            "latents_history_4x": rand(batch, 4, 16, height, width),
            "indices_latents_history_4x": torch.arange(6 + frames, 22 + frames),
        }
        with torch.no_grad():
            want, got = model(**inputs).sample, override(**inputs).sample
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
