"""Encoder–decoder models as two graphs (CONTRACTS.md, "Encoder–decoder tasks").

One type per positional scheme: t5 (relative buckets), bart (learned, offset 2, counted from the
self cache), marian (sinusoidal, not saved in the checkpoint), whisper (speech encoder, learned
decoder positions). Each is checked on the encoder output, a 4-token decoder prefill, one cached
step, and 12 greedy tokens (and each step's logits) against HF ``generate``, batch 2 with a
right-padded encoder input.
"""

from __future__ import annotations

import json

import pytest

import mobius
from mobius.sources.config import from_hf
from mobius.tasks.detect import detect_task
from mobius.testing.configs import tiny_config_for
from mobius.testing.seq2seq import NEW_TOKENS, encoder_inputs, seq2seq_parity, tiny_seq2seq

ATOL = 1e-4
TYPES = {
    "t5": "text2text-generation",
    "bart": "text2text-generation",
    "marian": "text2text-generation",
    "whisper": "automatic-speech-recognition",
}


MODELS: dict[str, object] = {}


def encoder_inputs_for(model_type: str) -> dict:
    return encoder_inputs(MODELS[model_type])


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    done: dict[str, tuple] = {}

    def get(model_type: str):
        if model_type not in done:
            root = tmp_path_factory.mktemp(model_type)
            model, _ = tiny_seq2seq(model_type, root / "hf")
            out = mobius.build(root / "hf").save(root / "onnx")
            done[model_type] = (out, seq2seq_parity(model, out))
            MODELS[model_type] = model
        return done[model_type]

    return get


@pytest.mark.parametrize("model_type", TYPES)
def test_task_detected_from_config(model_type):
    assert detect_task(from_hf(tiny_config_for(model_type))).name == TYPES[model_type]


@pytest.mark.parametrize("model_type", TYPES)
def test_encoder_prefill_and_step_match_pytorch(model_type, converted):
    _, diffs = converted(model_type)
    assert diffs["encoder_diff"] <= ATOL
    assert diffs["prefill_diff"] <= ATOL
    assert diffs["decode_diff"] <= ATOL


@pytest.mark.parametrize("model_type", TYPES)
def test_greedy_generation_matches_hf_generate(model_type, converted):
    _, diffs = converted(model_type)
    assert diffs["generate_logits_diff"] <= ATOL
    assert diffs["tokens"] == diffs["hf_tokens"]
    assert len(diffs["tokens"][0]) == NEW_TOKENS + 1


def test_package_lists_both_graphs(converted):
    out, _ = converted("bart")
    manifest = json.loads((out / "mobius.json").read_text())
    assert manifest["task"] == "text2text-generation"
    assert manifest["decoder_start_token_id"] == 2
    graphs = manifest["graphs"]
    assert set(graphs) == {"encoder_model.onnx", "decoder_model.onnx"}
    assert graphs["encoder_model.onnx"]["inputs"] == ["input_ids", "attention_mask"]
    assert graphs["encoder_model.onnx"]["outputs"][:3] == [
        "last_hidden_state",
        "present.0.encoder.key",
        "present.0.encoder.value",
    ]
    decoder = graphs["decoder_model.onnx"]
    assert decoder["inputs"][:6] == [
        "input_ids",
        "encoder_attention_mask",
        "past_key_values.0.encoder.key",
        "past_key_values.0.encoder.value",
        "past_key_values.0.decoder.key",
        "past_key_values.0.decoder.value",
    ]
    assert decoder["outputs"][:3] == ["logits", "present.0.decoder.key", "present.0.decoder.value"]
    for graph in graphs:
        assert (out / graph).is_file() and (out / f"{graph}.data").is_file()
    assert not (out / "model.onnx").exists()


def test_speech_encoder_takes_features_and_decoder_no_mask(converted):
    out, _ = converted("whisper")
    graphs = json.loads((out / "mobius.json").read_text())["graphs"]
    assert graphs["encoder_model.onnx"]["inputs"] == ["input_features"]
    assert "encoder_attention_mask" not in graphs["decoder_model.onnx"]["inputs"]


def test_explain_reports_which_modules_went_to_which_graph(converted):
    out, _ = converted("bart")
    report = json.loads((out / "explain.json").read_text())
    paths = {m["path"] for m in report["modules"]}
    # the encoder graph holds the encoder and the decoder's cross-attention key/value projections
    assert "encoder_model.model.encoder.layers.0.self_attn.q_proj" in paths
    assert "encoder_model.model.decoder.layers.0.encoder_attn.k_proj" in paths
    assert "encoder_model.model.decoder.layers.0.encoder_attn.q_proj" not in paths
    assert "encoder_model.model.decoder.layers.0.fc1" not in paths
    # the decoder graph: everything of the decoder but those projections, nothing of the encoder
    assert "decoder_model.model.decoder.layers.0.encoder_attn.q_proj" in paths
    assert "decoder_model.model.decoder.layers.0.encoder_attn.k_proj" not in paths
    assert not any(p.startswith("decoder_model.model.encoder.") for p in paths)
    assert report["summary"]["unsupported_ops"] == {}


@pytest.mark.parametrize("model_type", ["bart", "t5"])
def test_self_and_cross_attention_are_fused(model_type, converted):
    """Encoder self-attention (padded), decoder self-attention (causal over the grown cache) and
    cross-attention (padded by encoder_attention_mask) are one Attention node each; T5's relative
    position bias is the Attention's additive bias."""
    import onnx

    out, _ = converted(model_type)
    report = json.loads((out / "explain.json").read_text())
    kinds = sorted(
        (m["path"].split(".", 1)[0], c["attributes"]["kind"], c["attributes"]["bias"])
        for m in report["modules"]
        for c in m["components"]
        if c["component"] == "Attention"
    )
    bias = model_type == "t5"  # self-attention only; T5's cross-attention bias is zeros
    assert kinds == sorted(
        [("encoder_model", "padded", bias)] * 2
        + [("decoder_model", "causal", bias)] * 2
        + [("decoder_model", "padded", False)] * 2
    )
    assert not [g for g in report["summary"]["gaps"] if g["kind"] in ("cache", "attention")]
    for graph, count in (("encoder_model.onnx", 2), ("decoder_model.onnx", 4)):
        nodes = onnx.load(out / graph, load_external_data=False).graph.node
        assert sum(n.op_type == "Attention" for n in nodes) == count


def test_runner_generate_is_the_greedy_loop(converted):
    from mobius.runtime.seq2seq import Seq2SeqRunner

    out, diffs = converted("t5")
    feeds = {
        k: v.numpy()
        for k, v in encoder_inputs_for("t5").items()  # the inputs seq2seq_parity used
    }
    tokens = Seq2SeqRunner(out).generate(max_new_tokens=NEW_TOKENS, **feeds)
    assert tokens.tolist() == diffs["hf_tokens"]
    stop = diffs["hf_tokens"][0][3]  # rows stop at an end token, then repeat it
    short = Seq2SeqRunner(out).generate(max_new_tokens=NEW_TOKENS, eos_token_id=stop, **feeds)
    assert short[0].tolist()[:4] == diffs["hf_tokens"][0][:4]
    assert all(t == stop for t in short[0].tolist()[4:])


def test_one_token_decoder_runs_in_a_token_loop(tmp_path):
    """ProphetNet's decoder takes one token per cached call: its graph is that step run per token
    by an ONNX Loop, reading the encoder's keys and values from the outer scope. Its encoder
    output, 4-token prefill, cached step and ``generate`` equal HF's, the prefill against HF's
    token-by-token decoding (``testing/seq2seq._hf_prefill``: HF's one-call multi-token forward
    permutes its predict stream's relative-position bias across positions)."""
    import onnx

    model, _ = tiny_seq2seq("prophetnet", tmp_path / "hf")
    out = mobius.build(tmp_path / "hf").save(tmp_path / "onnx")
    diffs = seq2seq_parity(model, out, new_tokens=4)
    assert diffs["encoder_diff"] <= ATOL and diffs["prefill_diff"] <= ATOL
    assert diffs["decode_diff"] <= ATOL and diffs["generate_logits_diff"] <= ATOL
    assert diffs["tokens_equal"]
    nodes = onnx.load(out / "decoder_model.onnx", load_external_data=False).graph.node
    assert [n.op_type for n in nodes].count("Loop") == 1
