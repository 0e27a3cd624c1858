"""Gemma 4's overrides (mobius/synth/overrides/gemma4.py) compute what HF computes, eagerly in
float32; the traced graphs are checked by benchmarks/vlm_coverage.py."""

from __future__ import annotations

import torch


def _positions(rows: int, columns: int, padding: int) -> torch.Tensor:
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(columns), indexing="ij")
    real = torch.stack([x.flatten(), y.flatten()], -1)
    return torch.cat([real, torch.full((padding, 2), -1)])


def test_pooler_with_the_config_kernel_equals_hf_with_padding_patches():
    from transformers.models.gemma4.configuration_gemma4 import Gemma4VisionConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4VisionModel

    from mobius.synth.overrides.gemma4 import pooled_by_kernel

    config = Gemma4VisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, head_dim=8, pooling_kernel_size=3, patch_size=2,
        position_embedding_size=64,
    )  # fmt: skip
    torch.manual_seed(0)
    tower = Gemma4VisionModel(config).eval()
    # two images padded to 81 patches: 6 x 9 real (6 features) and 3 x 3 real (1 feature)
    positions = torch.stack([_positions(6, 9, 27), _positions(3, 3, 72)])
    pixels = torch.rand(2, 81, 3 * 2 * 2)
    with torch.no_grad():
        expected = tower(pixel_values=pixels, pixel_position_ids=positions).last_hidden_state
        pooled_by_kernel(tower)
        got = tower(pixel_values=pixels, pixel_position_ids=positions).last_hidden_state
    assert got.shape == expected.shape == (7, 16)
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_per_layer_ids_from_embeddings_are_hf_ids_with_pad_at_image_features():
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextModel

    from mobius.synth.overrides.gemma4 import per_layer_ids_by_lookup

    config = Gemma4TextConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=8, hidden_size_per_layer_input=4,
        vocab_size_per_layer_input=64, pad_token_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Gemma4TextModel(config).eval()
    ids = torch.tensor([[5, 9, 0, 12, 33], [7, 7, 63, 1, 2]])
    image = torch.tensor([[False, True, True, False, False], [False] * 5])
    with torch.no_grad():
        embeds = model.embed_tokens(ids)
        embeds[image] = torch.randn(int(image.sum()), 16)  # merged image features
        expected = model.get_per_layer_inputs(ids.masked_fill(image, 0))
        per_layer_ids_by_lookup(model)
        got = model.get_per_layer_inputs(None, embeds)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
