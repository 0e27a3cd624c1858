"""``static-cache``: fixed-size buffers written in place; prefill and decode equal PyTorch."""

from __future__ import annotations

import json

import numpy as np
import onnx_ir as ir
import pytest

from mobius.errors import ConfigError
from mobius.features import apply_features
from mobius.output.package import ModelPackage
from mobius.runtime.causal_lm import OnnxCausalLM
from mobius.runtime.static import StaticCacheLM

LENGTH = 24


@pytest.fixture(scope="module")
def static_dir(converted):
    return converted.with_features("static-cache", max_seq_len=LENGTH)


def test_contract(static_dir):
    graph = ir.load(static_dir / "model.onnx").graph
    caches = [v for v in graph.inputs if v.name.startswith("past_key_values.")]
    assert caches and all(v.shape[2] == LENGTH for v in caches)
    presents = {v.name: v for v in graph.outputs if v.name.startswith("present.")}
    assert all(
        presents[v.name.replace("past_key_values", "present")].shape[2] == LENGTH for v in caches
    )
    assert {n.op_type for n in graph} >= {"TensorScatter", "Attention"}
    genai = json.loads((static_dir / "genai_config.json").read_text())
    assert genai["search"]["past_present_share_buffer"] is True
    assert genai["search"]["max_length"] == LENGTH
    assert json.loads((static_dir / "mobius.json").read_text())["features"] == ["static-cache"]


def test_prefill_and_decode_match_pytorch_in_place(converted, static_dir):
    lm = StaticCacheLM(static_dir)
    ids, mask, positions = converted.batch()
    prompt = ids.shape[1]
    lm.reset(2)
    buffer = lm.buffers["past_key_values.0.key"]
    logits = lm.run(ids, mask, positions)
    # the caller's buffer itself holds the keys the growing-cache graph returns
    dynamic = OnnxCausalLM(converted.base)
    _, cache = dynamic.run(ids, mask, positions, dynamic.empty_cache(2))
    np.testing.assert_allclose(
        buffer.numpy()[:, :, :prompt], cache["past_key_values.0.key"], atol=1e-5, rtol=0
    )
    assert not buffer.numpy()[:, :, prompt:].any()
    steps = [logits]
    for _ in range(5):
        token = logits[:, -1].argmax(-1)[:, None]
        ids, mask = np.concatenate([ids, token], 1), np.concatenate([mask, np.ones_like(token)], 1)
        positions = np.clip(mask.cumsum(-1) - 1, 0, None)
        logits = lm.run(token, mask, positions[:, -1:])
        assert lm.buffers["past_key_values.0.key"] is buffer
        steps.append(logits)
    # causal: one forward over the whole sequence gives every step's reference
    reference = converted.hf_logits(ids, mask, positions)
    got = np.concatenate(steps, axis=1)
    real = mask.astype(bool)  # a padded position's row is not compared
    np.testing.assert_allclose(got[real], reference[real], atol=1e-4, rtol=0)


def test_genai_and_generate_drive_it(converted, static_dir):
    """genai's shared-buffer mode, and `mobius generate --runtime onnxruntime`'s driver, give
    the growing cache's greedy tokens."""
    from mobius.runtime.generate import _driver, genai_tokens

    ids, mask, _ = converted.batch()
    prompt = [int(t) for t in ids[0]]
    expected = OnnxCausalLM(converted.base).generate(ids[:1], mask[:1], 10)[0].tolist()
    tokens = list(genai_tokens(static_dir, prompt, 10))
    assert tokens == expected[: len(tokens)] and tokens  # genai stops at the eos id
    driver = _driver(static_dir)
    assert isinstance(driver, StaticCacheLM)
    assert list(driver.stream(prompt, 10)) == expected
    # the buffers end the generation: 7 + 17 = 24 slots, then no more tokens
    assert len(list(driver.stream(prompt, 40))) == LENGTH - len(prompt) + 1


def test_a_cache_the_trace_carries_is_refused():
    past = ir.Value(
        name="past_key_values.0.key",
        shape=ir.Shape(["batch", 2, "past", 4]),
        type=ir.TensorType(ir.DataType.FLOAT),
    )
    new = ir.Value(
        name="key", shape=ir.Shape(["batch", 2, "seq", 4]), type=ir.TensorType(ir.DataType.FLOAT)
    )
    concat = ir.node("Concat", [past, new], {"axis": 2})
    concat.outputs[0].name = "present.0.key"
    graph = ir.Graph([past, new], concat.outputs, nodes=[concat], opset_imports={"": 23})
    package = ModelPackage(model=ir.Model(graph, ir_version=10), texts={})
    with pytest.raises(ConfigError, match="trace carries past_key_values.0.key"):
        apply_features(package, ["static-cache"])
