"""``prune-prefill-prefix``: logits for the last position only.

A prefill of ``n`` tokens otherwise materialises ``[batch, n, vocab]`` logits (4k tokens of a
150k vocabulary: 2.4 GB in float32) of which generation reads the last row. The final hidden
state is sliced to its last position before the language-model head, so ``logits`` is
``[batch, 1, vocab]`` for every call. With left padding (the contract's) the last position is
every row's last real token.

The head is found from ``logits`` backwards: through elementwise ops (Gemma 2's softcap, casts)
and reshapes to the ``MatMul`` / ``FusedMatMul`` (``--ep cpu|cuda|dml``) / ``Gemm`` /
``MatMulNBits`` whose weight is an initializer; its input (before a reshape to 2-D, for a tied
``Gemm`` head) is the hidden state to slice. Every user of that hidden state must lead to
``logits`` alone.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.features.checks import require_causal_cache
from mobius.output.package import ModelPackage

# ops between the head's product and ``logits`` that act on each position by itself
_PER_POSITION = {"Reshape", "Cast", "CastLike", "Div", "Mul", "Tanh", "Add", "Sub", "Identity"}
_HEADS = {"MatMul", "FusedMatMul", "Gemm", "MatMulNBits"}
INT64_MAX = 2**63 - 1


def _refuse(reason: str) -> ConfigError:
    return ConfigError(f"--features prune-prefill-prefix: {reason}")


def find_head(graph: ir.Graph) -> tuple[ir.Node, ir.Value]:
    """(the language-model head node, the 3-D hidden state it reads)."""
    logits = next((v for v in graph.outputs if v.name == "logits"), None)
    if logits is None:
        raise _refuse("the graph has no logits output")
    node = logits.producer()
    while node is not None and node.op_type in _PER_POSITION:
        node = node.inputs[0].producer() if node.inputs[0] is not None else None
    if node is None or node.op_type not in _HEADS or not node.inputs[1].is_initializer():
        found = node.op_type if node is not None else "a graph input"
        raise _refuse(f"no language-model head before logits (found {found})")
    hidden = node.inputs[0]
    reshape = hidden.producer()
    if reshape is not None and reshape.op_type == "Reshape" and node.op_type == "Gemm":
        hidden = reshape.inputs[0]
    if hidden.shape is not None and len(hidden.shape) != 3:
        raise _refuse(
            f"the head reads a {len(hidden.shape)}-D hidden state, not [batch, seq, hidden]"
        )
    return node, hidden


def _reaches(value: ir.Value) -> set[str]:
    """Names of the graph outputs that ``value`` flows into."""
    seen: set[int] = set()
    found: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v.is_graph_output():
            found.add(v.name)
        for user, _ in v.uses():
            stack.extend(user.outputs)
    return found


def prune_prefill_prefix(package: ModelPackage, options) -> None:
    require_causal_cache(package, "prune-prefill-prefix")
    graph = package.model.graph
    head, hidden = find_head(graph)
    if _reaches(hidden) != {"logits"}:
        raise _refuse("the final hidden state feeds outputs other than logits")
    users = list(hidden.uses())
    ints = [
        ir.node("Constant", [], {"value": ir.tensor([v], dtype=ir.DataType.INT64)})
        for v in (-1, INT64_MAX, 1)
    ]
    last = ir.node(
        "Slice", [hidden, *(c.outputs[0] for c in ints)], name="prune_prefill_prefix.Slice"
    )
    last.outputs[0].name = "prune_prefill_prefix.last_hidden"
    last.outputs[0].dtype = hidden.dtype
    if hidden.shape is not None:
        last.outputs[0].shape = ir.Shape([hidden.shape[0], 1, hidden.shape[2]])
    first_user = min((graph.index(user) for user, _ in users), default=len(graph))
    graph.insert_before(graph.node(first_user), [*ints, last])
    for user, index in users:
        user.replace_input_with(index, last.outputs[0])
    _forget_shapes(last.outputs[0])
    logits = next(v for v in graph.outputs if v.name == "logits")
    vocab = logits.shape[-1] if logits.shape is not None else None
    logits.shape = ir.Shape(["batch", 1, vocab])


def _forget_shapes(value: ir.Value) -> None:
    """Drop the shapes recorded downstream of ``value`` (their sequence axis is now 1)."""
    stack = [user for user, _ in value.uses()]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for out in node.outputs:
            if not out.is_graph_output():
                out.shape = None
            stack.extend(user for user, _ in out.uses())
