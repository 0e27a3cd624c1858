"""OmniGen's batched override against diffusers' list form in PyTorch: stacked input latents
with spans placed anywhere in each row's prompt give diffusers' result on the list and the dict
of spans, and a span past the prompt gives its result with no input image (a text-only
prompt)."""

from __future__ import annotations

import copy

import diffusers
import torch

from mobius.diffusers.overrides import omnigen
from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled


def test_batched_input_images_match_the_list_form():
    kwargs = next(c for c in ALL_CONFIGS if c[0] == "OmniGenTransformer2DModel")[2]
    model = randomize_scaled(diffusers.OmniGenTransformer2DModel(**kwargs), 0).eval()
    batched = copy.deepcopy(model)
    omnigen.stacked_input_images(batched)
    omnigen.scaling_by_where(batched.rope)
    gen = torch.Generator().manual_seed(0)
    batch, text, height, width = 3, 6, 8, 4
    length = text + 1 + (height // 2) * (width // 2)
    x = torch.randn(batch, 4, height, width, generator=gen)
    timestep = torch.rand(batch, generator=gen) * 900
    ids = torch.randint(0, 16, (batch, text), generator=gen)
    latents = torch.randn(batch, 4, 2, 4, generator=gen)  # 2 patch tokens each
    mask = (torch.rand(batch, length, length, generator=gen) > 0.3).float()
    mask[:, range(length), range(length)] = 1.0
    positions = torch.arange(length).repeat(batch, 1)
    spans = torch.tensor([[0, 2], [1, 3], [4, 6]])
    past = torch.tensor([[text, text + 2]] * batch)
    with torch.no_grad():
        listed = model(x, timestep, ids, list(latents.split(1)),
                       {row: [tuple(s)] for row, s in enumerate(spans.tolist())}, mask,
                       positions).sample  # fmt: skip
        text_only = model(x, timestep, ids, [], {}, mask, positions).sample
        got = batched(x, timestep, ids, latents, spans, mask, positions).sample
        got_text_only = batched(x, timestep, ids, latents, past, mask, positions).sample
    assert (got - listed).abs().max() < 1e-6
    assert torch.equal(got_text_only, text_only)
