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


def add_lora_inputs(model: ir.Model, targets: tuple[str, ...], dtype: str) -> LoraInputs:
    """Give every linear of ``model`` whose module path ends with one of ``targets`` (or every
    linear but the output head, for ``all-linear``) its LoRA inputs; in place."""
    graph = model.graph
    done = LoraInputs(dtype)
    for node in list(graph):
        found = _linear(node)
        if found is None:
            continue
        path, n_in, n_out = found
        if not _selected(path, targets) or path in done.modules:
            continue
        _add_path(graph, node, path, n_in, n_out)
        done.modules[path] = [n_out, n_in]
    if not done.modules:
        raise UnsupportedError(
            f"--lora-inputs {','.join(targets)}: no linear of the model has such a name"
        )
    return done


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


def _add_path(graph: ir.Graph, node: ir.Node, path: str, n_in: int, n_out: int) -> None:
    """``y + (x @ A^T) @ B^T`` after the MatMul ``node``; A and B are new graph inputs."""
    x, y = node.inputs[0], node.outputs[0]
    elem = node.inputs[1].dtype
    name_a, name_b = input_names(path)
    rank = rank_dim(path)
    a = _input(graph, name_a, elem, [rank, n_in], (0, n_in))
    b = _input(graph, name_b, elem, [n_out, rank], (n_out, 0))
    perm = ir.AttrInt64s("perm", [1, 0])
    prefix = f"{path}/lora"
    a_t = ir.Node("", "Transpose", [a], [perm], name=f"{prefix}/Transpose_A")
    b_t = ir.Node("", "Transpose", [b], [perm], name=f"{prefix}/Transpose_B")
    down = ir.Node("", "MatMul", [x, a_t.outputs[0]], name=f"{prefix}/MatMul_A")
    up = ir.Node("", "MatMul", [down.outputs[0], b_t.outputs[0]], name=f"{prefix}/MatMul_B")
    add = ir.Node("", "Add", [y, up.outputs[0]], name=f"{prefix}/Add")
    for n, out in ((a_t, "A_T"), (b_t, "B_T"), (down, "down"), (up, "up"), (add, "out")):
        n.outputs[0].name = f"{prefix}/{out}"
    add.outputs[0].shape, add.outputs[0].type = y.shape, y.type
    uses = [u for u in y.uses() if u.node is not add]
    for use in uses:
        use.node.replace_input_with(use.idx, add.outputs[0])
    if y.is_graph_output():
        outputs = graph.outputs
        outputs[outputs.index(y)] = add.outputs[0]
        add.outputs[0].name, y.name = y.name, f"{prefix}/base"
    graph.insert_after(node, [a_t, b_t, down, up, add])


def _input(graph: ir.Graph, name: str, elem, dims: list, empty: tuple[int, int]) -> ir.Value:
    """A graph input with an empty initializer of the same name as its default."""
    value = ir.Value(name=name, type=ir.TensorType(elem), shape=ir.Shape(dims))
    value.const_value = ir.tensor(np.zeros(empty, dtype=elem.numpy()), name=name)
    graph.inputs.append(value)
    graph.register_initializer(value)
    return value
