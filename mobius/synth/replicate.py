"""Trace two decoder layers, replicate the second for the rest (issue 17: conversion speed).

``torch.export`` costs about the same for every decoder layer, and a 24-layer model's trace is
mostly 22 repeats of one layer. When every layer of the model is the same kind, mobius traces a
copy of the model with two layers and copies the second layer's nodes for layers 2..N-1.

It is safe only where the copies are what a full trace would give, so it is refused (the full
model is traced as before) unless:

- the layer stack is one ``nn.ModuleList`` of ``num_hidden_layers`` layers whose modules are the
  same, layer by layer (classes, parameter and buffer shapes, and every plain attribute such as a
  sliding window or a layer type, the layer's index aside), and every per-layer list in the config
  (``layer_types``, ...) holds one value: no per-layer windows, MoE next to dense, linear next
  to full attention;
- in the two-layer trace, layer 1 is layer 0 node for node, up to the layer index: the same ops,
  the same literals (a 0 in layer 0 may be a 1 in layer 1: the index, rewritten for each copy),
  the same shapes, each reading its own layer's parameters, layer 1 reading layer 0's outputs
  where layer 0 read the embedding's, both reading the same shared values (masks, rotary tables);
- nothing outside the layers reads layer 0, no lifted constant lives in a layer, the cache is
  not carried through the graph (captured attention only), and no attention call was declined.

``MOBIUS_FULL_TRACE=1`` turns replication off (for comparisons and debugging).
"""

from __future__ import annotations

import copy
import logging
import os
import re
from dataclasses import dataclass

import torch
import torch.fx
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

from patterns.base import WRAPPER_PREFIX, module_of

log = logging.getLogger("mobius")

TRACED_LAYERS = 2
# module attributes that hold the layer's own index (they differ between layers by design)
INDEX_ATTRIBUTES = {"layer_idx", "layer_id", "layer_index", "layer_number", "idx"}


@dataclass
class LayerStack:
    """Where the decoder layers live: ``path`` (``model.layers``) and their number."""

    path: str
    count: int


def enabled() -> bool:
    return os.environ.get("MOBIUS_FULL_TRACE", "") in ("", "0")


def homogeneous_stack(model: torch.nn.Module, hf_config) -> LayerStack | None:
    """The model's layer stack if all its layers are one kind (and there are more than two)."""
    count = getattr(hf_config, "num_hidden_layers", None)
    if not isinstance(count, int) or count <= TRACED_LAYERS:
        return None
    stacks = [
        (path, mod)
        for path, mod in model.named_modules()
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == count
    ]
    if len(stacks) != 1:
        return None
    path, layers = stacks[0]
    first = _signature(layers[0])
    if any(_signature(layer) != first for layer in layers):
        return None
    if _per_layer_lists(hf_config, count) is None:
        return None
    return LayerStack(path, count)


def reduced_config(hf_config, count: int):
    """``hf_config`` with two layers (per-layer lists cut to match)."""
    lists = _per_layer_lists(hf_config, count) or {}
    reduced = copy.deepcopy(hf_config)
    reduced.num_hidden_layers = TRACED_LAYERS
    for name, value in lists.items():
        setattr(reduced, name, type(value)(value[:TRACED_LAYERS]))
    return reduced


def _per_layer_lists(hf_config, count: int) -> dict[str, list | tuple] | None:
    """Config attributes that are lists with one entry per layer; None if one holds two values."""
    found = {}
    for name, value in vars(hf_config).items():
        if isinstance(value, (list, tuple)) and len(value) == count and count > 1:
            if any(v != value[0] for v in value):
                return None
            found[name] = value
    return found


def _signature(layer: torch.nn.Module) -> list:
    sig: list = []
    for name, mod in layer.named_modules():
        attrs = sorted(
            (k, v)
            for k, v in vars(mod).items()
            if not k.startswith("_")
            and k not in INDEX_ATTRIBUTES
            and (v is None or isinstance(v, (int, float, str, bool)))
        )
        sig.append((name, type(mod).__qualname__, attrs))
    sig += [(n, tuple(p.shape), p.dtype) for n, p in layer.named_parameters()]
    sig += [(n, tuple(b.shape), b.dtype) for n, b in layer.named_buffers()]
    return sig


class NotReplicable(Exception):
    """The two traced layers differ beyond the layer index (or touch what replication cannot)."""


def replicate(program: torch.export.ExportedProgram, stack: LayerStack) -> None:
    """Extend ``program`` (traced with two layers) to ``stack.count`` layers, in place.

    Raises NotReplicable, before changing anything, if layer 1 is not layer 0 up to the index.
    """
    graph = program.graph
    prefix = f"{stack.path}."
    layer_of: dict[torch.fx.Node, int] = {}
    for node in graph.nodes:
        if node.op == "call_function":
            path = module_of(node)[0]
            if path.startswith(prefix):
                index = path[len(prefix) :].split(".", 1)[0]
                if index.isdigit():
                    layer_of[node] = int(index)
    first = [n for n in graph.nodes if layer_of.get(n) == 0]
    second = [n for n in graph.nodes if layer_of.get(n) == 1]
    if not first or len(first) != len(second):
        raise NotReplicable("the two traced layers have different node counts")
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = dict(zip(placeholders, program.graph_signature.input_specs, strict=True))
    layer_params = {0: {}, 1: {}}  # layer -> name inside the layer -> placeholder
    for node, spec in specs.items():
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target:
            local = _inside_layer(spec.target.removeprefix(WRAPPER_PREFIX), prefix)
            if local is not None and local[0] in layer_params:
                layer_params[local[0]][local[1]] = node
            elif local is not None:
                raise NotReplicable(f"a parameter of layer {local[0]} in a two-layer trace")
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            if any(layer_of.get(u) is not None for u in node.users):
                raise NotReplicable("a lifted constant inside a layer")
    if set(layer_params[0]) != set(layer_params[1]):
        raise NotReplicable("the two layers have different parameters")
    pair = dict(zip(first, second, strict=True))
    param_pair = {layer_params[0][k]: layer_params[1][k] for k in layer_params[0]}
    carried: dict[torch.fx.Node, torch.fx.Node] = {}  # layer 0's input -> layer 1's (in layer 0)
    index_args: set[tuple[torch.fx.Node, tuple]] = set()  # (layer-1 node, arg path) holding "1"
    for a, b in pair.items():
        if a.target != b.target or len(a.args) != len(b.args) or set(a.kwargs) != set(b.kwargs):
            raise NotReplicable(f"{a.name} and {b.name} differ")
        _same(a.args, b.args, pair, param_pair, carried, layer_of, index_args, b, ())
        for k in a.kwargs:
            _same(
                a.kwargs[k], b.kwargs[k], pair, param_pair, carried, layer_of, index_args, b, (k,)
            )
        if not _same_value(a.meta.get("val"), b.meta.get("val")):
            raise NotReplicable(f"{a.name} and {b.name} have different shapes")
    for node in first:
        if any(layer_of.get(u) is None and u.op != "output" for u in node.users):
            raise NotReplicable(f"{node.name} of layer 0 is read outside the layers")
        if any(u.op == "output" for u in node.users):
            raise NotReplicable(f"{node.name} of layer 0 is a graph output")
    outside_users = [
        (user, node) for node in second for user in node.users if layer_of.get(user) is None
    ]
    _extend(
        program, stack, second, layer_params[1], specs, carried, pair, index_args, outside_users
    )


def _inside_layer(target: str, prefix: str) -> tuple[int, str] | None:
    if not target.startswith(prefix):
        return None
    index, _, rest = target[len(prefix) :].partition(".")
    return (int(index), rest) if index.isdigit() else None


def _same(a, b, pair, param_pair, carried, layer_of, index_args, owner, where) -> None:
    """Layer 0's argument ``a`` matches layer 1's ``b``; records carried inputs and index literals."""
    if isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node):
        if a in pair:
            ok = pair[a] is b
        elif a in param_pair:
            ok = param_pair[a] is b
        elif a is b:
            ok = layer_of.get(a) is None  # a shared value: the mask, the rotary tables, a size
        else:  # layer 0 reads the embedding where layer 1 reads layer 0's output
            ok = layer_of.get(a) is None and layer_of.get(b) == 0 and carried.get(a, b) is b
            carried[a] = b
        if not ok:
            raise NotReplicable(f"{owner.name} reads {b.name} where layer 0 reads {a.name}")
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, pair, param_pair, carried, layer_of, index_args, owner, (*where, i))
    elif type(a) is type(b) and a == b:
        pass
    elif a == 0 and b == 1 and type(a) is int and type(b) is int:
        index_args.add((owner, where))  # the layer index
    else:
        raise NotReplicable(f"{owner.name}: {a!r} in layer 0, {b!r} in layer 1")


def _same_value(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and [str(d) for d in a.shape] == [str(d) for d in b.shape]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b)


def _extend(program, stack, second, params, specs, carried, pair, index_args, outside_users):
    graph = program.graph
    prefix = f"{WRAPPER_PREFIX}{stack.path}."
    signature = program.graph_signature
    # layer 1's input that layer 0 produced -> the node of layer 1 in the same place
    previous = {b0: pair[b0] for b0 in carried.values()}
    index_set = {(owner, where) for owner, where in index_args}
    last_of_kind: dict[InputKind, torch.fx.Node] = {}
    for node in params.values():
        last_of_kind[specs[node].kind] = node
    anchor = second[-1]
    layer_nodes = {n: n for n in second}  # layer 1 -> the current layer's copy
    for layer in range(TRACED_LAYERS, stack.count):
        # parameters and buffers of this layer, placed after the last one of their kind
        new_params: dict[torch.fx.Node, torch.fx.Node] = {}
        for local, node in params.items():
            spec = specs[node]
            after = last_of_kind[spec.kind]
            with graph.inserting_after(after):
                fresh = graph.placeholder(f"{node.name}__layer{layer}")
            fresh.meta = dict(node.meta)
            target = f"{prefix}{layer}.{local}"
            new_spec = InputSpec(spec.kind, TensorArgument(fresh.name), target, spec.persistent)
            position = signature.input_specs.index(specs[after]) + 1
            signature.input_specs.insert(position, new_spec)
            specs[fresh] = new_spec
            last_of_kind[spec.kind] = fresh
            if spec.target in program.state_dict:
                program.state_dict[target] = program.state_dict[spec.target]
            new_params[node] = fresh
        copies: dict[torch.fx.Node, torch.fx.Node] = {}

        def remap(arg, copies=copies, new_params=new_params, layer_nodes=layer_nodes):
            if arg in copies:
                return copies[arg]
            if arg in new_params:
                return new_params[arg]
            if arg in previous:  # what layer 0 produced for layer 1: the previous copy's
                return layer_nodes[previous[arg]]
            return arg

        for node in second:
            with graph.inserting_after(anchor):
                fresh = graph.node_copy(node, remap)
            fresh.meta = dict(node.meta)
            fresh.meta["nn_module_stack"] = _renamed_stack(node, prefix, layer)
            for owner, where in index_set:
                if owner is node:
                    _set_index(fresh, where, layer)
            copies[node] = fresh
            anchor = fresh
        layer_nodes = {n: copies[n] for n in second}
    for user, node in outside_users:
        user.replace_input_with(node, layer_nodes[node])
    graph.lint()


def _renamed_stack(node: torch.fx.Node, prefix: str, layer: int) -> dict:
    """The node's module stack with layer 1's path (dotted or underscored) as ``layer``'s."""
    pattern = re.compile(
        rf"{re.escape(prefix)}{TRACED_LAYERS - 1}(?=[.]|$)"
        rf"|{re.escape(prefix.replace('.', '_'))}{TRACED_LAYERS - 1}(?=_|$)"
    )

    def rename(text):
        if not isinstance(text, str):
            return text
        return pattern.sub(lambda m: m.group(0)[: -len(str(TRACED_LAYERS - 1))] + str(layer), text)

    stack = node.meta.get("nn_module_stack") or {}
    return {rename(key): (rename(path), cls) for key, (path, cls) in stack.items()}


def _set_index(node: torch.fx.Node, where: tuple, layer: int) -> None:
    key, rest = where[0], where[1:]
    if isinstance(key, str):
        node.kwargs = {**node.kwargs, key: _replaced(node.kwargs[key], rest, layer)}
    else:
        args = list(node.args)
        args[key] = _replaced(args[key], rest, layer)
        node.args = tuple(args)


def _replaced(value, where: tuple, layer: int):
    if not where:
        return layer
    items = list(value)
    items[where[0]] = _replaced(items[where[0]], where[1:], layer)
    return type(value)(items)
