"""GIT's split (tasks/vlm_prepend.py, synth/overrides/git.py) in torch, no conversion: the
features method, the prepending embedding step and the overridden decoder reproduce HF's forward
with the image (batch 2, one image, a left-padded row) and a cached step. (The sweep,
benchmarks/vlm_coverage.py --only git, checks the converted graphs end to end.)"""

from __future__ import annotations

import copy

import torch

from mobius.sources.config import from_hf
from mobius.synth.overrides import git as git_override
from mobius.tasks.vlm import IMAGE_TEXT_TO_TEXT, merge_image_features, vision_outputs
from mobius.tasks.vlm_prepend import image_rows
from mobius.tasks.vlm_unsplit import why_not_split
from mobius.testing.configs import tiny_config_for

ATOL = 1e-5


def test_git_splits_into_the_three_graphs_like_its_forward():
    from transformers import DynamicCache, GitForCausalLM

    config = tiny_config_for("git")
    assert IMAGE_TEXT_TO_TEXT.supports(from_hf(config)) and why_not_split(from_hf(config)) is None
    torch.manual_seed(0)
    hf = GitForCausalLM(config).eval()
    ours = copy.deepcopy(hf)
    git_override.split_forward(ours.git)
    rows = image_rows(config)
    size = config.vision_config.image_size
    pixels = torch.randn(1, 3, size, size)
    ids = torch.randint(3, config.vocab_size - 3, (2, 5))
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = config.pad_token_id or 0, 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    step = torch.randint(3, config.vocab_size - 3, (2, 1))
    step_mask = torch.cat([mask, torch.ones_like(step)], 1)
    with torch.no_grad():
        first = hf(input_ids=ids, attention_mask=mask, pixel_values=pixels, position_ids=positions)
        second = hf(
            input_ids=step,
            attention_mask=step_mask,
            position_ids=positions[:, -1:] + 1,
            cache=first.past_key_values,
        )
        features, _ = vision_outputs(ours, {"pixel_values": pixels})
        assert features.shape[0] == rows
        embeds = merge_image_features(ours, ids, features)
        assert embeds.shape[1] == rows + ids.shape[1]
        cache = DynamicCache(config=config)
        prefill = ours(
            inputs_embeds=embeds,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
        )
        text_only = merge_image_features(ours, step, features[:0])
        cached = ours(
            inputs_embeds=text_only,
            attention_mask=step_mask,
            position_ids=positions[:, -1:] + 1,
            cache=prefill.past_key_values,
            use_cache=True,
        )
    real = torch.cat([torch.ones(2, rows, dtype=torch.bool), mask.bool()], 1)
    assert (prefill.logits - first.logits)[real].abs().max() <= ATOL
    assert (cached.logits - second.logits).abs().max() <= ATOL
