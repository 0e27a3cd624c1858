"""Trace one representative of each kind of decoder layer, replicate it for the rest (issue 17).

``torch.export`` costs about the same for every decoder layer, and a 61-layer model's trace is
mostly repeats of two or three kinds of layer. mobius sorts the layers into kinds, traces a copy
of the model cut to the shortest prefix that holds two layers of every kind found after it, and
copies the last traced layer of each kind for the layers after the prefix.

A layer's kind is its modules (classes, parameter and buffer shapes, every plain attribute such
as a sliding window or a layer type, the layer's index aside) plus its entries in every
per-layer list of the config (``layer_types``, ...): per-layer windows, MoE next to dense
(DeepSeek's first ``first_k_dense_replace`` layers), linear next to full attention, stay apart.
Gemma-3's five sliding layers then one full layer trace 12 layers; DeepSeek-V3 traces 5 of 61.

It is safe only where the copies are what a full trace would give, so it is refused (the full
model is traced as before) unless:

- the layer stack is one ``nn.ModuleList`` of ``num_hidden_layers`` layers, and the cut model's
  layers are the full model's first layers, kind for kind;
- in the cut trace, the last layer of each kind is the one before it of that kind, node for node,
  up to the layer index: the same ops, the same literals (a 3 in one may be a 4 in the other: the
  index, rewritten for each copy), the same shapes, each reading its own layer's parameters and
  its own previous layer's output, both reading the same shared values (masks, rotary tables);
- layers hand one value to the next (the hidden states; any number with a single kind), a
  layer's output is read only by the next layer (the last one's by what follows the stack), no
  lifted constant lives in a layer, the cache is not carried through the graph (captured
  attention only), and no attention call was declined.

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

# module attributes that hold the layer's own index (they differ between layers by design)
INDEX_ATTRIBUTES = {"layer_idx", "layer_id", "layer_index", "layer_number", "idx"}


@dataclass
class LayerPlan:
    """The decoder layers at ``path``: ``kinds[i]`` numbers layer i's kind (0, 1, ... in order of
    first appearance); the first ``traced`` layers are traced, and hold two layers of every kind
    that follows them."""

    path: str
    kinds: list[int]
    traced: int
    signatures: list  # per kind: the modules' signature (checked on the cut model)

    @property
    def count(self) -> int:
        return len(self.kinds)

    @property
    def copied_kinds(self) -> list[int]:
        """The kinds of the layers after the traced prefix."""
        return sorted(set(self.kinds[self.traced :]))

    def representative(self, kind: int) -> tuple[int, int]:
        """(the layer copied for ``kind``, the traced layer of that kind it is checked against)."""
        traced = [i for i in range(self.traced) if self.kinds[i] == kind]
        return traced[-1], traced[-2]


def enabled() -> bool:
    return os.environ.get("MOBIUS_FULL_TRACE", "") in ("", "0")


def layer_plan(model: torch.nn.Module, hf_config) -> LayerPlan | None:
    """How to trace ``model`` replicating its layers; None where a prefix would be all of them."""
    count = getattr(hf_config, "num_hidden_layers", None)
    if not isinstance(count, int) or count <= 2:
        return None
    stacks = [
        (path, mod)
        for path, mod in model.named_modules()
        if isinstance(mod, torch.nn.ModuleList) and len(mod) == count
    ]
    if len(stacks) != 1:
        return None
    path, layers = stacks[0]
    lists = _per_layer_lists(hf_config, count)
    keys: list = []
    signatures: list = []
    kinds: list[int] = []
    for index, layer in enumerate(layers):
        signature = _signature(layer)
        key = (signature, tuple(repr(value[index]) for value in lists.values()))
        if key not in keys:
            keys.append(key)
            signatures.append(signature)
        kinds.append(keys.index(key))
    traced = next((p for p in range(2, count) if _covers(kinds, p)), count)
    if traced >= count:
        return None
    return LayerPlan(path, kinds, traced, signatures)


def _covers(kinds: list[int], prefix: int) -> bool:
    """Every layer after ``prefix`` is of a kind with two layers inside it."""
    return all(kinds[:prefix].count(kind) >= 2 for kind in set(kinds[prefix:]))


def reduced_config(hf_config, plan: LayerPlan):
    """``hf_config`` cut to the plan's traced layers (per-layer lists cut to match)."""
    lists = _per_layer_lists(hf_config, plan.count)
    reduced = copy.deepcopy(hf_config)
    reduced.num_hidden_layers = plan.traced
    for name, value in lists.items():
        setattr(reduced, name, type(value)(value[: plan.traced]))
    return reduced


def same_layers(model: torch.nn.Module, plan: LayerPlan) -> bool:
    """The cut ``model``'s layers are the full model's first ones, kind for kind."""
    layers = dict(model.named_modules()).get(plan.path)
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) != plan.traced:
        return False
    return all(
        _signature(layer) == plan.signatures[plan.kinds[i]] for i, layer in enumerate(layers)
    )


def _per_layer_lists(hf_config, count: int) -> dict[str, list | tuple]:
    """Config attributes that are lists with one entry per layer."""
    return {
        name: value
        for name, value in vars(hf_config).items()
        if isinstance(value, (list, tuple)) and len(value) == count
    }


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
    """Two traced layers of one kind differ beyond the layer index (or touch what replication
    cannot)."""


@dataclass
class _Traced:
    """The cut trace, split by layer."""

    nodes: dict[int, list[torch.fx.Node]]  # layer -> its call_function nodes, in graph order
    layer_of: dict[torch.fx.Node, int]
    params: dict[int, dict[str, torch.fx.Node]]  # layer -> name inside the layer -> placeholder
    specs: dict[torch.fx.Node, InputSpec]
    outputs: dict[int, list[torch.fx.Node]]  # layer -> its nodes read outside it, in graph order


def replicate(program: torch.export.ExportedProgram, plan: LayerPlan) -> None:
    """Extend ``program`` (traced with ``plan.traced`` layers) to all the layers, in place.

    Raises NotReplicable, before changing anything, if a kind's two traced layers differ beyond
    the index, or the layers are wired in a way copies would not reproduce.
    """
    traced = _split(program, plan)
    index_args: dict[int, set[tuple[torch.fx.Node, tuple]]] = {}
    for kind in plan.copied_kinds:
        copied, partner = plan.representative(kind)
        index_args[kind] = _compare(traced, partner, copied)
    _extend(program, plan, traced, index_args)


def _split(program: torch.export.ExportedProgram, plan: LayerPlan) -> _Traced:
    prefix = f"{plan.path}."
    layer_of: dict[torch.fx.Node, int] = {}
    nodes: dict[int, list[torch.fx.Node]] = {i: [] for i in range(plan.traced)}
    for node in program.graph.nodes:
        if node.op == "call_function" and not _shape_value(node):
            local = _inside_layer(module_of(node)[0], prefix)
            if local is not None:
                if local[0] not in nodes:
                    raise NotReplicable(f"{node.name} is in layer {local[0]} of a cut trace")
                layer_of[node] = local[0]
                nodes[local[0]].append(node)
    if not all(nodes.values()):
        raise NotReplicable("a traced layer has no nodes")
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    specs = dict(zip(placeholders, program.graph_signature.input_specs, strict=True))
    params: dict[int, dict[str, torch.fx.Node]] = {i: {} for i in nodes}
    for node, spec in specs.items():
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target:
            local = _inside_layer(spec.target.removeprefix(WRAPPER_PREFIX), prefix)
            if local is not None and local[0] in params:
                params[local[0]][local[1]] = node
            elif local is not None:
                raise NotReplicable(f"a parameter of layer {local[0]} in a cut trace")
        elif spec.kind in (InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            if any(u in layer_of for u in node.users):
                raise NotReplicable("a lifted constant inside a layer")
    last = plan.traced - 1
    outputs: dict[int, list[torch.fx.Node]] = {}
    for i, layer_nodes in nodes.items():
        outputs[i] = [n for n in layer_nodes if any(layer_of.get(u) != i for u in n.users)]
        readers = {layer_of.get(u) for n in outputs[i] for u in n.users} - {i}
        if readers != ({None} if i == last else {i + 1}):
            raise NotReplicable(f"layer {i}'s output is read beyond the next layer")
    widths = {len(o) for o in outputs.values()}
    if len(widths) != 1 or (len(plan.signatures) > 1 and widths != {1}):
        raise NotReplicable("layers hand different numbers of values to the next")
    return _Traced(nodes, layer_of, params, specs, outputs)


def _inside_layer(target: str, prefix: str) -> tuple[int, str] | None:
    if not target.startswith(prefix):
        return None
    index, _, rest = target[len(prefix) :].partition(".")
    return (int(index), rest) if index.isdigit() else None


def _compare(traced: _Traced, first: int, second: int) -> set[tuple[torch.fx.Node, tuple]]:
    """Layer ``second`` is layer ``first`` node for node up to the index; the (node of
    ``second``, argument path) pairs holding the index."""
    a_nodes, b_nodes = traced.nodes[first], traced.nodes[second]
    if len(a_nodes) != len(b_nodes):
        raise NotReplicable(f"layers {first} and {second} have different node counts")
    if set(traced.params[first]) != set(traced.params[second]):
        raise NotReplicable(f"layers {first} and {second} have different parameters")
    match = _Match(traced, first, second, dict(zip(a_nodes, b_nodes, strict=True)))
    for a, b in match.pair.items():
        if a.target != b.target or len(a.args) != len(b.args) or set(a.kwargs) != set(b.kwargs):
            raise NotReplicable(f"{a.name} and {b.name} differ")
        match.same(a.args, b.args, b, ())
        for k in a.kwargs:
            match.same(a.kwargs[k], b.kwargs[k], b, (k,))
        if not _same_value(a.meta.get("val"), b.meta.get("val")):
            raise NotReplicable(f"{a.name} and {b.name} have different shapes")
    return match.index_args


class _Match:
    """Compares the arguments of two layers' paired nodes."""

    def __init__(self, traced: _Traced, first: int, second: int, pair: dict) -> None:
        self.traced, self.first, self.second, self.pair = traced, first, second, pair
        self.param_pair = {
            node: traced.params[second][name] for name, node in traced.params[first].items()
        }
        self.carried: dict[torch.fx.Node, int] = {}  # layer 0's input -> output position
        self.index_args: set[tuple[torch.fx.Node, tuple]] = set()

    def same(self, a, b, owner: torch.fx.Node, where: tuple) -> None:
        layer_of = self.traced.layer_of
        if isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node):
            if a in self.pair:
                ok = self.pair[a] is b
            elif a in self.param_pair:
                ok = self.param_pair[a] is b
            elif a is b:
                ok = layer_of.get(a) is None  # a shared value: the mask, the rotary tables
            elif _shape_value(a) and _shape_value(b):  # batch x length, made in either layer
                ok = str(a.meta["val"]) == str(b.meta["val"])
            else:  # each reads its previous layer's output (layer 0: what precedes the stack)
                ok = self._previous_output(a, b)
            if not ok:
                raise NotReplicable(f"{owner.name} reads {b.name} where the other reads {a.name}")
        elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                self.same(x, y, owner, (*where, i))
        elif type(a) is type(b) and a == b:
            pass
        elif type(a) is int and type(b) is int and (a, b) == (self.first, self.second):
            self.index_args.add((owner, where))  # the layer index
        else:
            raise NotReplicable(f"{owner.name}: {a!r} in layer {self.first}, {b!r} in the other")

    def _previous_output(self, a: torch.fx.Node, b: torch.fx.Node) -> bool:
        outputs, layer_of = self.traced.outputs, self.traced.layer_of
        if layer_of.get(b) != self.second - 1 or b not in outputs[self.second - 1]:
            return False
        position = outputs[self.second - 1].index(b)
        if self.first == 0:
            if layer_of.get(a) is not None:
                return False
            return self.carried.setdefault(a, position) == position
        return layer_of.get(a) == self.first - 1 and outputs[self.first - 1].index(a) == position


def _extend(
    program: torch.export.ExportedProgram,
    plan: LayerPlan,
    traced: _Traced,
    index_args: dict[int, set[tuple[torch.fx.Node, tuple]]],
) -> None:
    graph = program.graph
    signature = program.graph_signature
    prefix = f"{WRAPPER_PREFIX}{plan.path}."
    last = plan.traced - 1
    previous_out = list(traced.outputs[last])  # what the layer before the next copy produced
    outside_users = [(u, n) for n in previous_out for u in n.users if u not in traced.layer_of]
    last_of_kind: dict[InputKind, torch.fx.Node] = {}
    for layer_params in traced.params.values():
        for node in layer_params.values():
            last_of_kind[traced.specs[node].kind] = node
    # new placeholders of a kind chain after the last traced one: their specs follow its spec
    position_of = {id(spec): i for i, spec in enumerate(signature.input_specs)}
    anchor_position = {k: position_of[id(traced.specs[n])] for k, n in last_of_kind.items()}
    new_specs: dict[int, list[InputSpec]] = {}  # position of a traced spec -> specs after it
    anchor = traced.nodes[last][-1]
    for layer in range(plan.traced, plan.count):
        kind = plan.kinds[layer]
        source = plan.representative(kind)[0]
        new_params: dict[torch.fx.Node, torch.fx.Node] = {}
        for local, node in traced.params[source].items():
            spec = traced.specs[node]
            after = last_of_kind[spec.kind]
            with graph.inserting_after(after):
                fresh = graph.placeholder(f"{node.name}__layer{layer}")
            fresh.meta = dict(node.meta)
            target = f"{prefix}{layer}.{local}"
            new_spec = InputSpec(spec.kind, TensorArgument(fresh.name), target, spec.persistent)
            new_specs.setdefault(anchor_position[spec.kind], []).append(new_spec)
            traced.specs[fresh] = new_spec
            last_of_kind[spec.kind] = fresh
            if spec.target in program.state_dict:
                program.state_dict[target] = program.state_dict[spec.target]
            new_params[node] = fresh
        inputs = traced.outputs[source - 1]
        carried = dict(zip(inputs, previous_out, strict=True))
        copies: dict[torch.fx.Node, torch.fx.Node] = {}

        def remap(arg, copies=copies, new_params=new_params, carried=carried):
            if arg in copies:
                return copies[arg]
            if arg in new_params:
                return new_params[arg]
            return carried.get(arg, arg)

        rename = _renamer(prefix, source, layer)
        indexed: dict[torch.fx.Node, list[tuple]] = {}
        for owner, where in index_args[kind]:
            indexed.setdefault(owner, []).append(where)
        for node in traced.nodes[source]:
            with graph.inserting_after(anchor):
                fresh = graph.node_copy(node, remap)
            fresh.meta = dict(node.meta)
            fresh.meta["nn_module_stack"] = _renamed_stack(node, rename)
            for where in indexed.get(node, ()):
                _set_index(fresh, where, layer)
            copies[node] = fresh
            anchor = fresh
        previous_out = [copies[n] for n in traced.outputs[source]]
    for user, node in outside_users:
        user.replace_input_with(node, previous_out[traced.outputs[last].index(node)])
    _insert_specs(signature, new_specs)
    graph.lint()


def _insert_specs(signature, new_specs: dict[int, list[InputSpec]]) -> None:
    specs = list(signature.input_specs)
    result: list[InputSpec] = []
    for i, spec in enumerate(specs):
        result.append(spec)
        result.extend(new_specs.get(i, ()))
    signature.input_specs[:] = result


def _renamer(prefix: str, source: int, layer: int):
    """Rewrites layer ``source``'s path (dotted or underscored) to ``layer``'s."""
    dotted = prefix.removeprefix(WRAPPER_PREFIX)
    pattern = re.compile(
        "|".join(
            rf"(?<![\w.]){re.escape(p)}{source}(?={sep}|$)"
            for p, sep in (
                (prefix, "[.]"),
                (dotted, "[.]"),
                (prefix.replace(".", "_"), "_"),
                (dotted.replace(".", "_"), "_"),
            )
        )
    )

    def rename(text):
        if not isinstance(text, str):
            return text
        return pattern.sub(lambda m: m.group(0)[: -len(str(source))] + str(layer), text)

    return rename


def _renamed_stack(node: torch.fx.Node, rename) -> dict:
    stack = node.meta.get("nn_module_stack") or {}
    return {rename(key): (rename(path), cls) for key, (path, cls) in stack.items()}


def _shape_value(node: torch.fx.Node) -> bool:
    """``node`` is a symbolic size made from the inputs' sizes alone (``batch * length``): export
    computes one where a layer first needs it and later layers reuse it, so it belongs to no
    layer and is never copied."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) and not (
        free_unbacked_symbols(val)
    )


def _same_value(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and [str(d) for d in a.shape] == [str(d) for d in b.shape]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b)


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
