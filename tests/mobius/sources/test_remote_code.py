"""Checkpoints with their own code (``auto_map``) convert with ``--trust-remote-code`` and no
``--task``, each style against PyTorch: prefill and one cached step (or the whole sequence where
no cache can be carried) on a left-padded batch of two; encoders on a padded batch."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification

from mobius.cli import main
from mobius.testing.parity import causal_lm_parity, contract_diffs
from mobius.testing.remote_code import STYLES, load_reference, write_checkpoint

ATOL = 1e-4
DECODERS = [
    ("no-cache", "matmul", False),
    ("no-cache", "sdpa", False),
    ("tuple-cache", "matmul", True),
    ("tuple-cache", "sdpa", True),
    ("cache-api", "matmul", True),
    ("cache-api", "sdpa", True),
]
CACHE_GRAPH = [
    "input_ids",
    "attention_mask",
    "position_ids",
    *(f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")),
]


def build(capsys, checkpoint: Path, out: Path, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    flags = ["--model", str(checkpoint), "--output", str(out), *extra]
    code = main(["build", *flags])
    return code, capsys.readouterr().err


def converted(capsys, tmp_path: Path, style: str, **overrides) -> tuple[Path, Path, dict]:
    """(checkpoint, output directory, mobius.json) of ``style``, built without ``--task``."""
    checkpoint = tmp_path / style.replace("-", "_")
    write_checkpoint(checkpoint, style, **overrides)
    out = tmp_path / "onnx"
    code, err = build(capsys, checkpoint, out, "--trust-remote-code")
    assert code == 0, err
    return checkpoint, out, json.loads((out / "mobius.json").read_text())


@pytest.mark.parametrize(("style", "attention", "cache"), DECODERS)
def test_decoder_styles_match_pytorch(capsys, caplog, tmp_path, style, attention, cache):
    checkpoint, out, meta = converted(capsys, tmp_path, style, attention=attention)
    assert meta["task"] == "text-generation" and meta["kv_cache"] is cache
    graph = meta["graphs"]["model.onnx"]
    if cache:
        assert graph["inputs"] == CACHE_GRAPH
        assert graph["outputs"] == ["logits"] + [
            f"present.{i}.{k}" for i in range(2) for k in ("key", "value")
        ]
    else:  # the cache-less graph, and why, in the log, mobius.json and explain.json
        assert graph == {"inputs": CACHE_GRAPH[:3], "outputs": ["logits"]}
        reason = "the model neither returns a cache nor takes one"
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert [line for line in warnings if line.startswith("fallback") and reason in line]
        assert any(reason in f["reason"] for f in meta["fallbacks"])
        assert reason in (out / "explain.json").read_text()
    model = load_reference(checkpoint, AutoModelForCausalLM)
    diffs = causal_lm_parity(model, out, model.config)
    assert diffs["cache"] is cache
    assert diffs["max_diff"] < ATOL, diffs


def test_fork_of_an_in_library_model_keeps_fused_attention_and_cache(capsys, tmp_path):
    checkpoint, out, meta = converted(capsys, tmp_path, "llama-fork")
    assert meta["model_type"] == "llama_fork" and meta["kv_cache"] is True
    assert meta["fallbacks"] == []  # its attention goes through transformers' interface
    assert meta["graphs"]["model.onnx"]["inputs"] == CACHE_GRAPH
    model = load_reference(checkpoint, AutoModelForCausalLM)
    assert model.config.logit_scale != 1  # the fork's own forward runs
    diffs = causal_lm_parity(model, out, model.config)
    assert diffs["cache"] and diffs["max_diff"] < ATOL, diffs


@pytest.mark.parametrize(
    ("style", "auto", "output"),
    [
        ("feature-extraction", AutoModel, "last_hidden_state"),
        ("text-classification", AutoModelForSequenceClassification, "logits"),
    ],
)
@pytest.mark.parametrize("attention", ["matmul", "sdpa"])
def test_encoder_heads_match_pytorch_on_a_padded_batch(
    capsys, tmp_path, style, auto, output, attention
):
    checkpoint, out, meta = converted(capsys, tmp_path, style, attention=attention)
    assert meta["task"] == style
    assert meta["graphs"]["model.onnx"] == {
        "inputs": ["input_ids", "attention_mask"],
        "outputs": [output],
    }
    model = load_reference(checkpoint, auto)
    diffs = contract_diffs(model, out, model.config)
    assert diffs[output] < ATOL, diffs


def test_mobius_json_records_the_code_that_ran(capsys, tmp_path):
    checkpoint, _, meta = converted(capsys, tmp_path, "tuple-cache")
    record = meta["remote_code"]
    assert record["classes"] == {
        "AutoConfig": "configuration_tiny.TinyConfig",
        "AutoModelForCausalLM": "modeling_tuple_cache.TupleForCausalLM",
    }
    files = {f["name"]: f["sha256"] for f in record["files"]}
    assert set(files) == set(STYLES["tuple-cache"].files)  # tiny_layers.py: a relative import
    for name, digest in files.items():
        assert hashlib.sha256((checkpoint / name).read_bytes()).hexdigest() == digest


def test_nothing_runs_without_the_flag(capsys, tmp_path):
    checkpoint = tmp_path / "ckpt"
    write_checkpoint(checkpoint, "cache-api")
    (checkpoint / "modeling_cache_api.py").write_text("raise SystemExit('ran')\n")
    code, err = build(capsys, checkpoint, tmp_path / "out", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("mobius: error: ") and "--trust-remote-code" in err
    assert "modeling_cache_api.py" in err and not (tmp_path / "out").exists()


def test_strict_refuses_the_cache_less_graph(capsys, tmp_path):
    checkpoint = tmp_path / "ckpt"
    write_checkpoint(checkpoint, "no-cache")
    code, err = build(capsys, checkpoint, tmp_path / "out", "--trust-remote-code", "--strict", "-q")
    assert code == 2, err
    assert "--strict" in err and "neither returns a cache nor takes one" in err


def test_missing_code_file_is_named(capsys, tmp_path):
    checkpoint = tmp_path / "ckpt"
    write_checkpoint(checkpoint, "no-cache")
    (checkpoint / "modeling_nocache.py").unlink()
    code, err = build(capsys, checkpoint, tmp_path / "out", "--trust-remote-code", "-q")
    assert code == 2 and err.startswith("mobius: error: "), err
    assert "modeling_nocache.py is not in" in err


@pytest.mark.parametrize(("style", "cache"), [("tuple-cache", True), ("no-cache", False)])
def test_attention_in_a_module_not_named_for_it(capsys, tmp_path, style, cache):
    """Attention is found by class name; where none is found and nothing is captured, the
    model's own cache is still carried (or the cache-less graph given), never a graph marked
    as cached without one."""
    checkpoint = tmp_path / "ckpt"
    write_checkpoint(checkpoint, style)
    code_file = checkpoint / STYLES[style].files[-1]
    renamed = {"tuple-cache": "TupleAttention", "no-cache": "SelfAttention"}[style]
    code_file.write_text(code_file.read_text().replace(renamed, "MHA"))
    code, err = build(capsys, checkpoint, tmp_path / "onnx", "--trust-remote-code")
    assert code == 0, err
    meta = json.loads((tmp_path / "onnx" / "mobius.json").read_text())
    assert meta["kv_cache"] is cache
    assert "no attention was captured" in meta["fallbacks"][0]["reason"]
    model = load_reference(checkpoint, AutoModelForCausalLM)
    diffs = causal_lm_parity(model, tmp_path / "onnx", model.config)
    assert diffs["cache"] is cache and diffs["max_diff"] < ATOL, diffs
