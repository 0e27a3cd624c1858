"""Repeated layers collapse into one line; layers that differ stay apart."""

from __future__ import annotations

from mobius.report import ExplainReport
from mobius.report.grouping import build_tree, group
from mobius.report.model import Component, ModuleReport, Summary
from mobius.report.paths import compact, ranges


def _layers(n: int, window_every: int = 0) -> list[ModuleReport]:
    mods = [
        ModuleReport("", "ToyForCausalLM", "lowered", lowered_ops={"aten.slice.Tensor": 2}),
        ModuleReport("model", "ToyModel", "empty"),
        ModuleReport("model.layers", "ModuleList", "empty"),
    ]
    for i in range(n):
        window = 4 if window_every and i % window_every else None
        attention = Component("attention", "Attention", {"layer": i, "heads": 4, "window": window})
        mods += [
            ModuleReport(
                f"model.layers.{i}", "ToyLayer", "lowered", lowered_ops={"aten.add.Tensor": 2}
            ),
            ModuleReport(f"model.layers.{i}.attn", "ToyAttention", "component", [attention]),
            ModuleReport(
                f"model.layers.{i}.attn.k_proj",
                "Linear",
                "lowered",
                lowered_ops={"aten.linear.default": 1},
            ),
            ModuleReport(
                f"model.layers.{i}.attn.v_proj",
                "Linear",
                "lowered",
                lowered_ops={"aten.linear.default": 1},
            ),
        ]
    return mods


def _report(modules: list[ModuleReport]) -> ExplainReport:
    summary = Summary("full", 0, 1, 0, 1, 0, 0, 0, 0.0, 0.0, True, True, 1, {}, [])
    return ExplainReport("toy", "toy", "causal-lm", modules, summary)


def test_identical_layers_share_one_line():
    report = _report(_layers(32))
    lines = report.render_text().splitlines()
    assert "   └─ layers.0–31: ToyLayer → lowered: add×2" in lines
    assert sum("ToyLayer" in line for line in lines) == 1
    assert any("k_proj, v_proj: Linear" in line for line in lines)
    assert len(lines) < 25  # a 32-layer model fits one screen


def test_layers_that_differ_are_grouped_apart():
    root = group(build_tree(_layers(12, window_every=6)))
    (model,) = root.children
    labels = [g.label for g in model.children]
    assert labels == ["layers.0,6", "layers.1–5,7–11"]
    assert [len(g.members) for g in model.children] == [2, 10]


def test_a_changed_op_histogram_splits_a_run():
    mods = _layers(4)
    changed = next(m for m in mods if m.path == "model.layers.2.attn.k_proj")
    changed.lowered_ops = {"aten.matmul.default": 1}
    root = group(build_tree(mods))
    assert [g.label for g in root.children[0].children] == ["layers.0–1,3", "layers.2"]


def test_compact_paths_and_ranges():
    assert ranges([3, 0, 1, 2, 7, 9, 10]) == "0–3,7,9–10"
    paths = [f"model.layers.{i}.mlp.experts.{e}" for i in range(3) for e in range(8)]
    assert compact(paths) == ["model.layers.0–2.mlp.experts.0–7"]
    assert compact(["a.0.x", "a.1.x", "a.1.y"]) == ["a.0–1.x", "a.1.y"]
    assert compact(["a.0.b.0", "a.1.b.1"]) == ["a.0.b.0", "a.1.b.1"]  # not a full grid
