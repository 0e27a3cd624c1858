"""explain on real (tiny) models: full conversion, lowering-only layers, fallback, blocked ops."""

from __future__ import annotations

import json

import pytest
import torch

import mobius
from lowering import find_lowering
from mobius.cli import main
from mobius.errors import UnsupportedError
from tests.mobius.report.conftest import BLOCKED_OP, MODEL_TYPE


def _module(report, path):
    return next(m for m in report.modules if m.path == path)


@pytest.fixture(scope="module")
def llama(checkpoints):
    directory, model, _ = checkpoints.get("llama")
    return directory, mobius.explain(directory), model


def test_llama_converts_fully(llama):
    _, report, model = llama
    assert report.exit_code == 0 and report.summary.verdict == "full"
    assert report.summary.kv_cache and report.summary.cache_layers == 2
    assert report.summary.gaps == [] and report.summary.unsupported_ops == {}
    attn = _module(report, "model.layers.1.self_attn")
    assert attn.status == "component"
    (use,) = [c for c in attn.components if c.component == "Attention"]
    attrs = use.attributes
    assert (attrs["heads"], attrs["kv_heads"], attrs["head_dim"], attrs["layer"]) == (4, 2, 16, 1)
    assert attrs["rope_type"] == "default" and attrs["rope_theta"] > 0
    norm = _module(report, "model.norm")
    assert [c.component for c in norm.components] == ["RMSNorm"]
    assert norm.components[0].attributes["eps"] == pytest.approx(1e-6)
    assert _module(report, "lm_head").lowered_ops == {"aten.linear.default": 1}
    s = report.summary
    assert 0 < s.node_coverage < 1 and s.component_nodes + s.lowered_nodes == s.nodes
    assert s.parameters == sum(p.numel() for p in model.parameters())


def test_moe_block_is_one_component(checkpoints):
    report = mobius.explain(checkpoints.get("mixtral")[0])
    experts = _module(report, "model.layers.0.mlp.experts")
    assert experts.status == "component" and not experts.lowered_ops
    (moe,) = experts.components
    assert moe.component == "MoE (com.microsoft)"
    assert moe.attributes == {
        "routing": "softmax_topk", "top_k": 2, "renormalize": True, "num_experts": 4,
        "activation": "silu",
    }  # fmt: skip
    assert report.exit_code == 0
    text = report.render_text()
    assert "layers.0–1: MixtralDecoderLayer" in text
    assert "experts: MixtralExperts → MoE (com.microsoft)(routing=softmax_topk, top_k=2" in text
    assert "gate: MixtralTopKRouter → lowered: linear" in text  # the logits the kernel routes by


def test_uncaptured_attention_carries_its_cache_through_the_trace(checkpoints):
    report = mobius.explain(checkpoints.get("bloom")[0])
    assert report.exit_code == 0 and report.summary.verdict == "full"
    assert report.summary.kv_cache and report.summary.cache_layers == 2
    (gap,) = [g for g in report.summary.gaps if g.kind == "cache"]
    assert gap.subject == "traced"
    assert gap.modules == ["transformer.h.0.self_attention", "transformer.h.1.self_attention"]
    assert "attention not captured in transformer.h.0.self_attention" in gap.next_step
    assert _module(report, "transformer.h.0.self_attention").declines


def test_fallback_without_cache_when_the_trace_cannot_carry_it(checkpoints, monkeypatch):
    from mobius.synth import trace as trace_mod

    def refuse(model):
        raise UnsupportedError("the model keeps its state in SomeCache, not a transformers Cache")

    monkeypatch.setattr(trace_mod, "probe_layout", refuse)
    report = mobius.explain(checkpoints.get("bloom")[0])
    assert report.exit_code == 1 and report.summary.verdict == "fallback"
    assert not report.summary.kv_cache
    (gap,) = [g for g in report.summary.gaps if g.kind == "cache"]
    assert gap.modules == ["transformer.h.0.self_attention", "transformer.h.1.self_attention"]
    assert "transformer.h.0–1.self_attention" in gap.next_step
    assert _module(report, "transformer.h.0.self_attention").declines
    (fallback,) = report.summary.fallbacks  # recorded with its reason and what it costs
    assert fallback["kind"] == "no-cache"
    assert fallback["costs"] == ["kv cache", "fused attention"]
    assert "not a transformers Cache" in fallback["reason"]


def test_blocked_op_is_named_with_its_modules(digamma_checkpoint, registered):
    assert find_lowering(BLOCKED_OP) is None, "pick another op: this one gained a lowering"
    assert BLOCKED_OP not in torch.export.default_decompositions()
    report = mobius.explain(digamma_checkpoint)
    assert report.model_type == MODEL_TYPE
    assert report.exit_code == 2 and report.summary.verdict == "blocked"
    mods = ["layers.0.mlp", "layers.1.mlp", "layers.2.mlp"]
    assert report.summary.unsupported_ops == {"aten.digamma.default": mods}
    assert _module(report, "layers.1.mlp").status == "blocked"
    assert _module(report, "layers.1.mlp.up").status == "lowered"
    (gap,) = [g for g in report.summary.gaps if g.kind == "lowering"]
    assert gap.next_step == "add a lowering for aten.digamma.default used in layers.0–2.mlp"
    with pytest.raises(UnsupportedError) as err:
        mobius.build(digamma_checkpoint, weights=False)
    assert "aten.digamma.default" in str(err.value)
    assert f"mobius explain --model {digamma_checkpoint}" in str(err.value)


def test_cli_exit_status_and_files(digamma_checkpoint, registered, tmp_path, capsys):
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    config = str(digamma_checkpoint / "config.json")  # a bare config.json works too
    argv = ["explain", "--model", config, "--task", "causal-lm"]
    assert main([*argv, "--json", str(out_json), "--html", str(out_html)]) == 2
    printed = capsys.readouterr().out
    assert "layers.0–2: DigammaLayer" in printed and "aten.digamma.default" in printed
    assert json.loads(out_json.read_text())["summary"]["exit_code"] == 2
    assert out_html.read_text().startswith("<!DOCTYPE html>")


def test_cli_config_error_exits_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{"model_type": "llamma"}')
    assert main(["explain", "--model", str(tmp_path)]) == 2
    assert "did you mean" in capsys.readouterr().err


def test_build_writes_explain_json(llama, tmp_path):
    directory, report, _ = llama
    target = mobius.build(directory, weights=False).save(tmp_path / "out")
    written = json.loads((target / "explain.json").read_text())
    assert written == json.loads(report.to_json())
