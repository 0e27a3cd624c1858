"""``--lora-inputs``: LoRA kept as graph inputs, so one graph serves many adapters.

For each adapted linear ``y = x @ W^T`` the graph gains two inputs, named as PEFT names the
factors without its ``base_model.model.`` prefix:

- ``<module path>.lora_A.weight`` ``[rank, in]``
- ``<module path>.lora_B.weight`` ``[out, rank]``, already scaled by ``alpha / r``

and computes ``y + (x @ A^T) @ B^T``. The rank is dynamic. Both inputs default to empty
tensors (rank 0), for which the added term is zero: without an adapter the graph is the base
model. The path is float in the model's dtype, beside a float or ``MatMulNBits`` base weight
(the inputs are added before quantization, which only rewrites linears by initializers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from mobius.errors import UnsupportedError

ALL_LINEAR = "all-linear"  # PEFT's name for every linear but the output head
LORA_GRAPH = "decoder_model"  # the graph of a multi-graph package that takes LoRA inputs


def rank_dim(path: str) -> str:
    """The symbolic rank of one module's factors: one name per module, since an adapter's ranks
    differ between modules (rank 0 where it leaves one alone). A shared name would tell
    onnxruntime they are equal, and its memory planner would reuse buffers on that promise."""
    return f"{path}.lora_rank"


_OUTPUT_HEADS = ("lm_head",)


def input_names(path: str) -> tuple[str, str]:
    """The graph inputs of the module at ``path``: (lora_A, lora_B)."""
    return f"{path}.lora_A.weight", f"{path}.lora_B.weight"


@dataclass
class LoraInputs:
    """What ``add_lora_inputs`` did: each adapted module's path -> ``[out, in]``."""

    dtype: str
    modules: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict:
        """``mobius.json``'s ``lora`` entry, which ``mobius adapter`` checks adapters against."""
        return {
            "mode": "inputs",
            "dtype": self.dtype,
            "scaled": "lora_B holds B * alpha / r (alpha / sqrt(r) with rslora)",
            "modules": self.modules,
        }


def parse_targets(spec: str) -> tuple[str, ...]:
    """``all-linear`` or a comma list of module names (``q_proj,v_proj``)."""
    names = tuple(s.strip() for s in spec.split(",") if s.strip())
    if not names:
        raise UnsupportedError("--lora-inputs needs module names (q_proj,v_proj) or all-linear")
    return names


def add_lora_inputs(
    model: ir.Model,
    targets: tuple[str, ...],
    dtype: str,
    param_to_key: dict[str, str] | None = None,
) -> LoraInputs:
    """Give every linear of ``model`` whose module path ends with one of ``targets`` (or every
    linear but the output head, for ``all-linear``) its LoRA inputs; in place. A packed linear
    (``...self.query+key+value``: several linears of one input as one MatMul) gets inputs for
    each of its linears when one of them is selected.

    Weights are named by checkpoint key; ``param_to_key`` (the weight binder's) gives each its
    module path in the HF model, which PEFT names adapters by (they differ where transformers
    renames keys at load time: ``language_model.model.layers`` -> ``model.language_model.layers``).
    """
    graph = model.graph
    done = LoraInputs(dtype)
    module_of = _module_paths(param_to_key or {})
    for node in list(graph):
        found = _linear(node)
        if found is None:
            continue
        path, n_in, n_out = found
        parts = _packed_parts(path, node) or [(path, n_out)]
        parts = [(module_of(p), out) for p, out in parts]
        if not any(_selected(p, targets) for p, _ in parts) or parts[0][0] in done.modules:
            continue
        _add_path(graph, node, parts, n_in)
        done.modules.update({p: [out, n_in] for p, out in parts})
    if not done.modules:
        raise UnsupportedError(
            f"--lora-inputs {','.join(targets)}: no linear of the model has such a name"
        )
    return done


def _module_paths(param_to_key: dict[str, str]):
    """checkpoint path -> module path (the same where the binder knows no other name)."""
    by_key = {key: param for param, key in param_to_key.items()}

    def module_of(path: str) -> str:
        param = by_key.get(f"{path}.weight")
        return param.removesuffix(".weight") if param is not None else path

    return module_of


def _packed_parts(path: str, node: ir.Node) -> list[tuple[str, int]] | None:
    """The linears of a packed MatMul (``lowering.packed``: weight ``<owner>.a+b+c.weight.T``,
    output split by a ``Split``, after the packed bias if any): (module path, out) each, in
    column order; None for a plain linear."""
    owner, _, last = path.rpartition(".")
    if "+" not in last:
        return None
    names = last.split("+")
    value = node.outputs[0]
    users = [u.node for u in value.uses()]
    if len(users) == 1 and users[0].op_type == "Add":
        value = users[0].outputs[0]
        users = [u.node for u in value.uses()]
    split = users[0] if len(users) == 1 and users[0].op_type == "Split" else None
    sizes = None
    if split is not None and len(split.inputs) > 1 and split.inputs[1] is not None:
        const = ir.convenience.get_const_tensor(split.inputs[1])
        sizes = None if const is None else [int(v) for v in const.numpy().reshape(-1)]
    if sizes is None or len(sizes) != len(names):
        raise UnsupportedError(
            f"--lora-inputs: the packed linear '{path}' is not split into its {len(names)} parts"
        )
    return [(f"{owner}.{name}", size) for name, size in zip(names, sizes, strict=True)]


def _linear(node: ir.Node) -> tuple[str, int, int] | None:
    """(module path, in, out) of a linear's MatMul on a 2-D weight initializer named by its
    state-dict key: ``<path>.weight.T`` (``[in, out]``, a transposed ``nn.Linear`` weight) or
    ``<path>.weight`` (``[in, out]`` as stored, GPT-2's Conv1D)."""
    if node.op_type != "MatMul" or node.domain != "" or len(node.inputs) != 2:
        return None
    weight = node.inputs[1]
    if weight is None or not weight.is_initializer() or weight.shape is None:
        return None
    if len(weight.shape) != 2 or not all(isinstance(d, int) for d in weight.shape):
        return None
    name = weight.name or ""
    for suffix in (".weight.T", ".weight"):
        if name.endswith(suffix):
            n_in, n_out = weight.shape
            return name.removesuffix(suffix), int(n_in), int(n_out)
    return None


def _selected(path: str, targets: tuple[str, ...]) -> bool:
    last = path.rsplit(".", 1)[-1]
    if ALL_LINEAR in targets:
        return last not in _OUTPUT_HEADS
    return any(path == t or path.endswith("." + t) for t in targets)


def _add_path(graph: ir.Graph, node: ir.Node, parts: list[tuple[str, int]], n_in: int) -> None:
    """``y + (x @ A^T) @ B^T`` after the MatMul ``node``; A and B are new graph inputs. For a
    packed MatMul, each part's product, concatenated in column order."""
    x, y = node.inputs[0], node.outputs[0]
    elem = node.inputs[1].dtype
    prefix = f"{parts[0][0]}/lora" if len(parts) == 1 else f"{node.name}/lora"
    new: list[ir.Node] = []
    ups = []
    for path, n_out in parts:
        name_a, name_b = input_names(path)
        rank = rank_dim(path)
        a = _input(graph, name_a, elem, [rank, n_in], (0, n_in))
        b = _input(graph, name_b, elem, [n_out, rank], (n_out, 0))
        perm = ir.AttrInt64s("perm", [1, 0])
        at = f"{path}/lora"
        a_t = ir.Node("", "Transpose", [a], [perm], name=f"{at}/Transpose_A")
        b_t = ir.Node("", "Transpose", [b], [perm], name=f"{at}/Transpose_B")
        down = ir.Node("", "MatMul", [x, a_t.outputs[0]], name=f"{at}/MatMul_A")
        up = ir.Node("", "MatMul", [down.outputs[0], b_t.outputs[0]], name=f"{at}/MatMul_B")
        for n, out in ((a_t, "A_T"), (b_t, "B_T"), (down, "down"), (up, "up")):
            n.outputs[0].name = f"{at}/{out}"
        new += [a_t, b_t, down, up]
        ups.append(up.outputs[0])
    if len(ups) > 1:
        concat = ir.Node("", "Concat", ups, [ir.AttrInt64("axis", -1)], name=f"{prefix}/Concat")
        concat.outputs[0].name = f"{prefix}/up"
        new.append(concat)
        ups = [concat.outputs[0]]
    add = ir.Node("", "Add", [y, ups[0]], name=f"{prefix}/Add")
    add.outputs[0].name = f"{prefix}/out"
    new.append(add)
    add.outputs[0].shape, add.outputs[0].type = y.shape, y.type
    uses = [u for u in y.uses() if u.node is not add]
    for use in uses:
        use.node.replace_input_with(use.idx, add.outputs[0])
    if y.is_graph_output():
        outputs = graph.outputs
        outputs[outputs.index(y)] = add.outputs[0]
        add.outputs[0].name, y.name = y.name, f"{prefix}/base"
    graph.insert_after(node, new)


def _input(graph: ir.Graph, name: str, elem, dims: list, empty: tuple[int, int]) -> ir.Value:
    """A graph input with an empty initializer of the same name as its default."""
    value = ir.Value(name=name, type=ir.TensorType(elem), shape=ir.Shape(dims))
    value.const_value = ir.tensor(np.zeros(empty, dtype=elem.numpy()), name=name)
    graph.inputs.append(value)
    graph.register_initializer(value)
    return value
