"""``static-cache``: key/value buffers of a fixed length, written in place.

I/O contract (names unchanged, so genai's ``past_present_share_buffer`` mode drives it):

- ``past_key_values.{i}.key/value``: ``[batch, kv_heads, max_seq_len, head_dim]``, the whole
  buffer; ``present.{i}.key/value``: the same buffer with the new tokens written in. Bind each
  ``present`` to its ``past`` (onnxruntime ``IOBinding``) and nothing is allocated per step:
  ``TensorScatter`` (opset 24) then writes in place; unbound, onnxruntime copies the buffer.
- ``attention_mask``: ``[batch, past + new]`` as without the feature. The write position is its
  length minus the new tokens (``past``), the same for every row (left padding); slots past it are
  masked out, so the buffer's tail may hold anything.
- ``input_ids`` / ``position_ids`` as before. ``past + new`` must not exceed ``max_seq_len``
  (onnxruntime's TensorScatter refuses the write).

Each captured ``Attention``-23 with a cache (inputs ``past_key``/``past_value``, which it would
concatenate) becomes ``TensorScatter`` of the new keys and values into the buffers and an
``Attention`` without a cache over the whole buffer, its mask padded to ``max_seq_len`` with the
dtype's lowest value. Graphs whose cache the trace carries (no captured attention) are refused.
"""

from __future__ import annotations

import json
import logging
import re

import ml_dtypes
import numpy as np
import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.features.checks import require_causal_cache
from mobius.output.package import ModelPackage

log = logging.getLogger("mobius")

DEFAULT_MAX_SEQ_LEN = 4096  # when --max-seq-len is not given: the model's limit, at most this
_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
INT64 = ir.DataType.INT64
_LOWEST = {
    ir.DataType.FLOAT: float(np.finfo(np.float32).min),
    ir.DataType.FLOAT16: float(np.finfo(np.float16).min),
    ir.DataType.BFLOAT16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).min),
    ir.DataType.DOUBLE: float(np.finfo(np.float64).min),
}


def _refuse(reason: str) -> ConfigError:
    return ConfigError(f"--features static-cache: {reason}")


class _Builder:
    """Appends nodes before ``anchor`` in ``graph``."""

    def __init__(self, graph: ir.Graph, anchor: ir.Node, prefix: str) -> None:
        self.graph, self.anchor, self.prefix, self.count = graph, anchor, prefix, 0

    def op(self, op_type: str, *inputs: ir.Value | None, num_outputs: int = 1, **attrs):
        self.count += 1
        node = ir.node(
            op_type,
            list(inputs),
            attrs,
            num_outputs=num_outputs,
            name=f"{self.prefix}.{op_type}_{self.count}",
        )
        for i, out in enumerate(node.outputs):
            out.name = f"{self.prefix}.{op_type}_{self.count}" + (f"_{i}" if i else "")
        self.graph.insert_before(self.anchor, node)
        return node.outputs[0] if num_outputs == 1 else node.outputs

    def ints(self, values: list[int]) -> ir.Value:
        return self.op("Constant", value=ir.tensor(values, dtype=INT64))


def max_seq_len_for(package: ModelPackage, requested: int | None) -> int:
    if requested is not None:
        if requested < 1:
            raise _refuse("--max-seq-len must be at least 1")
        return requested
    limit = None
    config = package.texts.get("genai_config.json")
    if config:
        limit = json.loads(config)["model"].get("context_length")
    return min(limit or DEFAULT_MAX_SEQ_LEN, DEFAULT_MAX_SEQ_LEN)


def _cache_attention(graph: ir.Graph) -> list[tuple[int, ir.Node]]:
    """(layer, node) for each Attention that takes the cache of layer ``i`` as its past."""
    found = []
    for node in graph:
        if (
            node.op_type != "Attention"
            or node.domain not in ("", "ai.onnx")
            or len(node.inputs) < 6
        ):
            continue
        past = node.inputs[4]
        match = _PAST.match(past.name or "") if past is not None else None
        if match and past.is_graph_input():
            found.append((int(match.group(1)), node))
    for layer, node in found:  # the buffers replace the past and present of this node alone
        values = [node.inputs[4], node.inputs[5], node.outputs[1], node.outputs[2]]
        if any(len(v.uses()) != (1 if v.is_graph_input() else 0) for v in values if v is not None):
            raise _refuse(f"layer {layer}'s cache is read by more than its own attention")
    return found


def static_cache(package: ModelPackage, options) -> None:
    require_causal_cache(package, "static-cache")
    model = package.model
    graph = model.graph
    length = max_seq_len_for(package, options.max_seq_len)
    found = _cache_attention(graph)
    pasts = [v for v in graph.inputs if _PAST.match(v.name or "")]
    if not found or len(found) * 2 != len(pasts):
        names = sorted(
            {v.name for v in graph.inputs if (v.name or "").startswith("past_")}
            - {n.inputs[i].name for _, n in found for i in (4, 5)}
        )
        raise _refuse(
            "every cache must feed a captured Attention; the trace carries "
            f"{', '.join(names[:4]) or 'the cache'} itself (see `mobius explain`)"
        )
    padded: dict[int, ir.Value] = {}  # mask value id -> the mask padded to the buffer
    for layer, node in found:
        _rewrite(graph, node, layer, length, padded)
    version = model.opset_imports.get("", 0)
    model.opset_imports[""] = max(version, 24)
    _update_genai(package, length)
    log.info("static-cache: key/value buffers of %d positions", length)


def _rewrite(graph: ir.Graph, node: ir.Node, layer: int, length: int, padded: dict) -> None:
    query, key, value, mask, past_key, past_value = node.inputs[:6]
    if mask is None:
        raise _refuse(f"layer {layer}'s attention takes no mask")
    b = _Builder(graph, node, f"static_cache.{layer}")
    attrs = {k: a.value for k, a in node.attributes.items()}
    if attrs.get("is_causal"):  # causal alignment would be to the buffer's end, not the mask's
        raise _refuse(f"layer {layer}'s attention is causal by attribute, not by its mask")
    heads = attrs.pop("q_num_heads", None), attrs.pop("kv_num_heads", None)
    packed = heads[0] is not None  # [batch, seq, heads * head_dim]
    if packed:
        query, key, value = (
            b.op("Transpose", b.op("Reshape", x, b.ints([0, 0, h, -1])), perm=[0, 2, 1, 3])
            for x, h in ((query, heads[0]), (key, heads[1]), (value, heads[1]))
        )
    new = b.op("Shape", key, start=2, end=3)  # [1]: tokens this call
    total = b.op("Shape", mask, start=-1)  # [1]: past + new
    past = b.op("Sub", total, new)
    where = b.op("Expand", past, b.op("Shape", query, start=0, end=1))  # [batch]
    present_key = b.op("TensorScatter", past_key, key, where, axis=2)
    present_value = b.op("TensorScatter", past_value, value, where, axis=2)
    if id(mask) not in padded:
        p = _Builder(graph, node, f"static_cache.mask{len(padded)}")
        rank = len(mask.shape) if mask.shape is not None else 4
        pads = p.op(
            "Concat", p.ints([0] * (2 * rank - 1)), p.op("Sub", p.ints([length]), total), axis=0
        )
        dtype = mask.dtype or ir.DataType.FLOAT
        fill = False if dtype == ir.DataType.BOOL else _LOWEST[dtype]
        padded[id(mask)] = p.op(
            "Pad", mask, pads, p.op("Constant", value=ir.tensor(fill, dtype=dtype))
        )
    y = b.op("Attention", query, present_key, present_value, padded[id(mask)], **attrs)
    if packed:
        y = b.op("Reshape", b.op("Transpose", y, perm=[0, 2, 1, 3]), b.ints([0, 0, -1]))
    y.dtype = node.outputs[0].dtype
    old_y, old_key, old_value = node.outputs[:3]
    old_y.replace_all_uses_with(y, replace_graph_outputs=True)
    for old, new_value, past_value_in in (
        (old_key, present_key, past_key),
        (old_value, present_value, past_value),
    ):
        name = old.name
        old.replace_all_uses_with(new_value, replace_graph_outputs=True)
        old.name = f"{name}.unused"
        new_value.name = name
        shape = list(past_value_in.shape)
        shape[2] = length
        past_value_in.shape = ir.Shape(shape)
        new_value.shape = ir.Shape(shape)
        new_value.dtype = past_value_in.dtype
    graph.remove(node, safe=True)


def _update_genai(package: ModelPackage, length: int) -> None:
    text = package.texts.get("genai_config.json")
    if not text:
        return
    config = json.loads(text)
    config["search"]["past_present_share_buffer"] = True
    config["search"]["max_length"] = length
    config["model"]["context_length"] = min(config["model"].get("context_length", length), length)
    package.texts["genai_config.json"] = json.dumps(config, indent=2)
