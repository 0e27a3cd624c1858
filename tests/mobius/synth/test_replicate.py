"""Tracing two layers and replicating the second gives the graph of the full trace (issue 17)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mobius.output.package import ModelPackage
from mobius.output.weights import Checkpoint
from mobius.sources import config as config_mod
from mobius.sources import resolve as source_mod
from mobius.synth import replicate
from mobius.synth import trace as trace_mod
from mobius.synth.emit import emit
from mobius.synth.meta_model import instantiate_on_meta
from mobius.synth.trace import trace
from mobius.tasks.detect import get_task
from mobius.testing.parity import max_abs_diff
from mobius.testing.tiny import make_checkpoint, tiny_config
from patterns.base import module_of


def _structure(traced) -> tuple[list[str], list[tuple]]:
    """The graph with node names replaced by positions: (inputs by kind and target, nodes)."""
    program = traced.program
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    where = {
        n: f"{spec.kind.name}:{spec.target}"
        for n, spec in zip(placeholders, program.graph_signature.input_specs, strict=True)
    }
    nodes = []

    def arg(x):
        if isinstance(x, torch.fx.Node):
            return where[x]
        if isinstance(x, (list, tuple)):
            return [arg(y) for y in x]
        return repr(x)

    for node in program.graph.nodes:
        if node.op == "placeholder":
            continue
        where[node] = f"#{len(nodes)}"
        path = module_of(node)[0] if node.op == "call_function" else ""
        kwargs = {k: arg(v) for k, v in node.kwargs.items()}
        nodes.append((str(node.target), arg(list(node.args)), kwargs, path))
    return sorted(where[n] for n in placeholders), nodes


def _arch(model_type: str, **overrides):
    return config_mod.from_hf(tiny_config(model_type, **overrides))


def test_a_replicated_trace_is_the_full_trace_and_converts(tmp_path, monkeypatch):
    directory = tmp_path / "llama4"
    model, config = make_checkpoint("llama", directory, num_hidden_layers=4)
    arch = config_mod.from_hf(config)
    task = get_task(None, arch)
    monkeypatch.setenv("MOBIUS_FULL_TRACE", "1")
    full = trace(arch, task, torch.float32)
    monkeypatch.setenv("MOBIUS_FULL_TRACE", "0")
    replicated = trace(arch, task, torch.float32)
    assert _structure(replicated) == _structure(full)
    # and the replicated layers bind their own weights: the converted model matches PyTorch
    binder = replicated.binder(Checkpoint(source_mod.resolve(directory).tensors))
    onnx_model = emit(replicated, binder, use_cache=True)
    out = ModelPackage(model=onnx_model).save(tmp_path / "onnx")
    assert max_abs_diff(model, out, config) <= 1e-4


class _Dense(torch.nn.Module):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.layer_idx = index
        self.up = torch.nn.Linear(8, 8)

    def forward(self, x, table):
        # table[layer_idx]: the index as a literal, rewritten in each copy
        return x + self.up(x) * table.select(0, self.layer_idx)


class _Moe(torch.nn.Module):
    def __init__(self, index: int, scaled: bool) -> None:
        super().__init__()
        self.layer_idx, self.scaled = index, scaled
        self.gate, self.up = torch.nn.Linear(8, 2), torch.nn.Linear(8, 16)

    def forward(self, x, table):
        flat = x.reshape(x.shape[0] * x.shape[1], 8)  # batch x length: a shared symbolic size
        mixed = self.up(flat).reshape(-1, 2, 8) * self.gate(flat).softmax(-1)[..., None]
        y = x + mixed.sum(1).reshape(x.shape) * table.select(0, self.layer_idx)
        return y * (1.0 + self.layer_idx) if self.scaled else y


class _Stack(torch.nn.Module):
    """Two dense layers then MoE layers, as DeepSeek's ``first_k_dense_replace``."""

    def __init__(self, count: int, scaled: bool = False) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(16, 8)
        self.layers = torch.nn.ModuleList(
            _Dense(i) if i < 2 else _Moe(i, scaled) for i in range(count)
        )
        self.register_buffer("table", torch.rand(count, 8))
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, ids):
        x, table = self.embed(ids), self.table * 2
        for layer in self.layers:
            x = layer(x, table)
        return self.norm(x)


class _Wrapper(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.m = model  # the prefix module_of expects

    def forward(self, ids):
        return self.m(ids)


def _toy(count: int, scaled: bool = False) -> torch.export.ExportedProgram:
    ids = torch.zeros(2, 3, dtype=torch.long)
    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    return torch.export.export(
        _Wrapper(_Stack(count, scaled)), (ids,), dynamic_shapes=({0: batch, 1: length},)
    )


def test_layers_of_two_kinds_replicate_to_the_full_trace():
    config = SimpleNamespace(num_hidden_layers=6, layer_types=["dense"] * 2 + ["moe"] * 4)
    plan = replicate.layer_plan(_Stack(6), config)
    assert plan is not None and (plan.kinds, plan.traced) == ([0, 0, 1, 1, 1, 1], 4)
    assert replicate.reduced_config(config, plan).layer_types == ["dense"] * 2 + ["moe"] * 2
    assert replicate.same_layers(_Stack(4), plan) and not replicate.same_layers(_Stack(3), plan)
    program = _toy(4)
    replicate.replicate(program, plan)
    assert _structure(SimpleNamespace(program=program)) == _structure(
        SimpleNamespace(program=_toy(6))
    )


def test_layers_that_differ_beyond_the_index_are_not_replicated():
    plan = replicate.layer_plan(_Stack(6, scaled=True), SimpleNamespace(num_hidden_layers=6))
    program = _toy(4, scaled=True)  # MoE layers scale by 1 + index: a float, not the index
    with pytest.raises(replicate.NotReplicable, match="3.0 in layer 2, 4.0"):
        replicate.replicate(program, plan)


@pytest.mark.parametrize(
    ("model_type", "overrides", "kinds", "traced"),
    [
        # full attention below max_window_layers, sliding above
        ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2},
         [0, 0, 1, 1, 1, 1], 4),
        ("deepseek_v3", {"first_k_dense_replace": 1}, [0, 1, 1, 1, 1, 1], 3),
    ],
)  # fmt: skip
def test_layer_kinds_follow_the_config(model_type, overrides, kinds, traced):
    arch = _arch(model_type, **{"num_hidden_layers": 6, **overrides})
    model = instantiate_on_meta(arch, get_task(None, arch), torch.float32)
    plan = replicate.layer_plan(model, arch.hf_config)
    assert (plan.kinds, plan.traced) == (kinds, traced)


def test_a_stack_of_two_is_traced_whole():
    arch = _arch("llama", num_hidden_layers=2)
    model = instantiate_on_meta(arch, get_task(None, arch), torch.float32)
    assert replicate.layer_plan(model, arch.hf_config) is None


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("llama", {}),
        # keys and values on the attention layers only, recurrent states on the mamba ones
        ("jamba", {"attn_layer_period": 2, "attn_layer_offset": 1, "num_key_value_heads": 2}),
    ],
)
def test_the_cut_models_cache_probe_is_the_full_models(model_type, overrides):
    """A replicated trace probes the cut model's cache (not the full model's): what it concludes
    for the full model is what probing the full model gives."""
    arch = _arch(model_type, num_hidden_layers=6, **overrides)
    task = get_task(None, arch)
    model = instantiate_on_meta(arch, task, torch.float32).to("meta")
    plan = replicate.layer_plan(model, arch.hf_config)
    assert plan is not None
    full = trace_mod._cache_summary(trace_mod._try_probe(model))
    assert full[0] is not None and full[1] > 0
    assert trace_mod._cut_cache(arch, task, torch.float32, None, plan) == full
