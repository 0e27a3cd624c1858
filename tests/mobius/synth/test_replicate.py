"""Tracing two layers and replicating the second gives the graph of the full trace (issue 17)."""

from __future__ import annotations

import pytest
import torch

from mobius import config as config_mod
from mobius import source as source_mod
from mobius.package import ModelPackage
from mobius.registry import get_task
from mobius.synth import replicate
from mobius.synth.emit import emit
from mobius.synth.trace import instantiate_on_meta, trace
from mobius.testing.parity import max_abs_diff
from mobius.testing.tiny import make_checkpoint, tiny_config
from mobius.weights import Checkpoint
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


@pytest.mark.parametrize(
    ("model_type", "overrides"),
    [
        ("gemma2", {}),  # sliding and global layers alternate
        ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 2}),
        ("llama", {"num_hidden_layers": 2}),  # nothing to replicate
    ],
)
def test_layers_of_different_kinds_are_all_traced(model_type, overrides):
    arch = _arch(model_type, **{"num_hidden_layers": 4, **overrides})
    task = get_task(None, arch)
    model = instantiate_on_meta(arch, task, torch.float32)
    assert replicate.homogeneous_stack(model, arch.hf_config) is None


def test_layers_of_one_kind_are_replicated():
    arch = _arch("qwen2", num_hidden_layers=5)
    model = instantiate_on_meta(arch, get_task(None, arch), torch.float32)
    stack = replicate.homogeneous_stack(model, arch.hf_config)
    assert stack == replicate.LayerStack("model.layers", 5)
    reduced = replicate.reduced_config(arch.hf_config, 5)
    assert reduced.num_hidden_layers == 2 and len(reduced.layer_types) == 2
