import numpy as np
import onnx_ir as ir
import torch
from transformers.models.gemma.modeling_gemma import GemmaConfig, GemmaModel
from transformers.models.opt.modeling_opt import OPTLearnedPositionalEmbedding

from mobius.components import Embedding, LearnedPositions


def test_embedding_existing_value(harness, rng):
    ref = torch.nn.Embedding(11, 6)
    ids = rng.integers(0, 11, (2, 5)).astype(np.int64)
    emb = Embedding(weight=harness.weight("embed_tokens.weight", ref.weight.detach().numpy()))
    (got,) = harness.run(emb(harness.op, harness.input("input_ids", ids)))
    np.testing.assert_array_equal(got, ref(torch.from_numpy(ids)).detach().numpy())


def test_embedding_gemma_scale_parameter_path(harness, load, rng):
    config = GemmaConfig(
        vocab_size=11,
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=4,
    )
    gemma = GemmaModel(config).eval().to(torch.float16)
    with torch.no_grad():
        gemma.embed_tokens.weight.normal_()
    ids = rng.integers(0, 11, (2, 5)).astype(np.int64)
    with (
        torch.no_grad()
    ):  # GemmaScaledWordEmbedding: weight[ids] * embed_scale rounded to the weight dtype
        expected = gemma.embed_tokens(torch.from_numpy(ids)).numpy()
    emb = Embedding(11, 8, scale=8**0.5, dtype=ir.DataType.FLOAT16, name="embed_tokens")
    load(emb, {"weight": gemma.embed_tokens.weight.detach().numpy()})
    (got,) = harness.run(emb(harness.op, harness.input("input_ids", ids)))
    assert "embed_tokens.weight" in harness.graph.initializers
    assert got.dtype == np.float16
    np.testing.assert_allclose(
        got.astype(np.float32), expected.astype(np.float32), rtol=1e-3
    )  # 1 ulp


def test_learned_positions_opt_offset(harness, rng):
    ref = OPTLearnedPositionalEmbedding(20, 6).eval()
    with torch.no_grad():
        ref.weight.normal_()
    position_ids = np.array([[0, 1, 2, 3], [0, 0, 1, 2]], dtype=np.int64)
    mask = torch.ones(2, 4, dtype=torch.long)
    expected = ref(mask, position_ids=torch.from_numpy(position_ids)).detach().numpy()
    pos = LearnedPositions(
        offset=2, weight=harness.weight("embed_positions.weight", ref.weight.detach().numpy())
    )
    (got,) = harness.run(pos(harness.op, harness.input("position_ids", position_ids)))
    np.testing.assert_array_equal(got, expected)
