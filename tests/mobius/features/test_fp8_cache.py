"""``fp8-kv-cache``: float8 e4m3 cache at the boundary; the round trip within e4m3's rounding."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir

from mobius.runtime.causal_lm import OnnxCausalLM


def e4m3_bound(x: np.ndarray) -> np.ndarray:
    """Round to nearest with 3 mantissa bits: half an ulp, 2**-4 relative for normal numbers;
    below e4m3's smallest normal (2**-6) the spacing is 2**-9, so 2**-10 absolute."""
    return np.maximum(np.abs(x) * 2.0**-4, 2.0**-10)


def test_cache_is_float8_and_within_the_rounding_bound(converted):
    directory = converted.with_features("fp8-kv-cache")
    graph = ir.load(directory / "model.onnx").graph
    caches = [
        v for v in [*graph.inputs, *graph.outputs] if v.name.startswith(("past_", "present."))
    ]
    assert caches and all(v.dtype == ir.DataType.FLOAT8E4M3FN for v in caches)
    assert not (directory / "genai_config.json").exists()  # genai has no float8 cache
    ids, mask, positions = converted.batch()
    wide, narrow = OnnxCausalLM(converted.base), OnnxCausalLM(directory)
    _, exact = wide.run(ids, mask, positions, wide.empty_cache(2))
    _, stored = narrow.run(ids, mask, positions, narrow.empty_cache(2))
    for name, x in exact.items():
        q = stored[name].view(ml_dtypes.float8_e4m3fn)
        assert np.abs(x).max() < 448  # no saturation in this test: the bound below holds
        error = np.abs(q.astype(np.float32) - x)
        assert (error <= e4m3_bound(x)).all(), name
        assert error.max() > 0  # really quantized
        # the prefill's present is the cast of the float32 present (the graph casts last)
        np.testing.assert_array_equal(
            q.view(np.uint8), x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        )


def test_decode_is_float32_attention_over_the_dequantized_cache(converted):
    """The only change is the cache's storage: a decode step equals the float32 graph fed the
    float8 cache widened back to float32. Greedy tokens are reported (docs/design/)."""
    directory = converted.with_features("fp8-kv-cache")
    wide, narrow = OnnxCausalLM(converted.base), OnnxCausalLM(directory)
    ids, mask, positions = converted.batch()
    logits, stored = narrow.run(ids, mask, positions, narrow.empty_cache(2))
    token = logits[:, -1].argmax(-1)[:, None]
    mask = np.concatenate([mask, np.ones_like(token)], 1)
    step = (token, mask, positions[:, -1:] + 1)
    widened = {k: v.view(ml_dtypes.float8_e4m3fn).astype(np.float32) for k, v in stored.items()}
    expected, _ = wide.run(*step, widened)
    got, _ = narrow.run(*step, stored)
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
    agree = (wide.generate(ids, mask[:, :-1], 12) == narrow.generate(ids, mask[:, :-1], 12)).mean()
    print(f"fp8-kv-cache: greedy tokens agree with float32 on {agree:.0%} of 2 x 12")
