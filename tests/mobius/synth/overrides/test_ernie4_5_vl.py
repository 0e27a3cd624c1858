"""Ernie 4.5 VL MoE's overrides (mobius/synth/overrides/ernie4_5_vl.py) compute what HF computes:
the resampler's frame pairing for images of several one-frame grids, and the MoE block's experts
per token type (text, image, video; and no types), eagerly in float32; then the converted model
end to end, with the decoder's token_type_ids sent to the vision experts."""

from __future__ import annotations

import pytest
import torch
from transformers.models.ernie4_5_vl_moe import modeling_ernie4_5_vl_moe as ernie

from mobius.synth.overrides import ernie4_5_vl
from mobius.tasks.vlm_type_ids import attends_both_ways, takes_token_type_ids
from mobius.testing.configs import tiny_config_for
from mobius.testing.tiny import randomize
from mobius.testing.vlm import VLM_OVERRIDES

# images (one frame each, as the image processor makes them): rows x columns of patches
GRID = torch.tensor([[1, 4, 6], [1, 2, 2], [1, 6, 4]])


def _config():
    return tiny_config_for("ernie4_5_vl_moe", **VLM_OVERRIDES.get("ernie4_5_vl_moe", {}))


def test_resampler_pairs_image_frames_as_hf():
    config = _config()
    resampler = randomize(ernie.Ernie4_5_VLMoeVariableResolutionResamplerModel(config)).eval()
    merge = config.vision_config.spatial_merge_size
    patches = torch.randn(int(GRID.prod(-1).sum()), config.vision_config.hidden_size)
    with torch.no_grad():
        expected = resampler(patches, GRID)
        ernie4_5_vl.image_frames_paired(resampler)
        got = resampler(patches, GRID)
    assert got.shape[0] == int(GRID.prod(-1).sum()) // merge**2
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("types", ["mixed", "text", "none"])
def test_moe_block_experts_by_type_as_hf(types):
    text = _config().text_config
    block = randomize(ernie.Ernie4_5_VLMoeMoeBlock(text)).eval()
    states = torch.randn(2, 7, text.hidden_size)
    type_ids = {
        "mixed": torch.tensor([[0, 1, 1, 1, 0, 2, 0], [0, 0, 0, 0, 1, 1, 0]]),
        "text": torch.zeros(2, 7, dtype=torch.long),
        "none": None,
    }[types]
    with torch.no_grad():
        expected = block(states, type_ids)
        ernie4_5_vl.experts_by_type(block)
        got = block(states, type_ids)
    for ours, theirs in zip(got, expected, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_expert_type_ids_are_a_decoder_input_with_causal_attention():
    model = ernie.Ernie4_5_VLMoeForConditionalGeneration
    assert takes_token_type_ids(model) and not attends_both_ways(model)


def test_converted_ernie4_5_vl_moe_matches_pytorch_with_two_images(tmp_path):
    """End to end: two images in the first row of a padded batch of two, their tokens sent to
    the vision experts (HF's moe_mm_token_type_ids, the decoder's token_type_ids); features,
    prefill, a cached step and 12 greedy tokens against PyTorch."""
    import mobius
    from mobius.testing.vlm import tiny_vlm, vlm_parity

    model, _ = tiny_vlm("ernie4_5_vl_moe", tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    result = vlm_parity(model, out, images=2)
    assert result["images"] == 2
    for key in ("features_diff", "prefill_diff", "decode_diff", "generate_logits_diff"):
        assert result[key] < 1e-4, (key, result[key])
    assert result["tokens_equal"], (result["tokens"], result["hf_tokens"])
