"""``--ep cpu|cuda|dml|webgpu``: the graph tuned for an onnxruntime execution provider.

- ``cuda``, ``dml``, ``webgpu``: each packed attention block becomes ``com.microsoft``
  ``GroupQueryAttention`` with rotary inside and packed QKV (``ep/gqa.py``), each residual
  add + RMSNorm one ``SkipSimplifiedLayerNormalization`` (``ep/skip_norm.py``), and the
  default dtype is f16 (an explicit ``--dtype`` wins).
- ``cpu``: ONNX ``Attention``-23 as emitted, which onnxruntime's CPU EP runs faster than
  GroupQueryAttention at every length measured in float (``docs/benchmarks.md``), fed by one
  packed QKV MatMul and a ``Split`` (``packed_qkv.pack_and_split``), and the residual add +
  RMSNorm pairs fused as for the GPU providers: fewer, larger kernels a step; f32 by default.
  With ``--precision`` (``quantized``), GroupQueryAttention as for the GPU providers (packed
  QKV, rotary inside), its cos/sin caches computed in the graph for the mask's length
  (``gqa.computed_caches``: no initializer): a quantized decode step is short enough that the
  90 nodes this saves (q/k/v ``Split``, two ``RotaryEmbedding`` a layer) are ~6 % of it
  (SmolLM2-135M, docs/design/). Blocks it cannot carry (4-D layout, head size not a
  multiple of 16) keep the Attention form, with the reason at info level.

A block in the 4-D layout (QK-norm, partial rotary, fused-QKV splits the packed block declines)
gets GQA over transposed inputs with its rotary left outside (``do_rotary=0``; listed in
``mobius.json``'s ``ep.rotary_outside_attention``). A block the GQA form cannot represent keeps the generic form; the reason goes to explain (a
``gqa`` decline on the module) and to ``mobius.json``'s ``ep`` entry, never silently.
``genai_config.json`` names the provider in ``session_options.provider_options``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import onnx_ir as ir

from mobius.ep import gqa
from mobius.ep.block import Block, attention_inputs, find_block, module_of
from mobius.ep.packed_qkv import pack_and_split
from mobius.ep.skip_norm import fuse_skip_norms
from mobius.findings import Decline

log = logging.getLogger("mobius")

EPS = ("cpu", "cuda", "dml", "webgpu")
GPU_EPS = ("cuda", "dml", "webgpu")
# genai's provider names in session_options.provider_options
GENAI_PROVIDERS = {"cuda": "cuda", "dml": "dml", "webgpu": "webgpu"}
# what onnxruntime-genai's builder (0.18) emits per provider: the dtypes its GroupQueryAttention
# kernels take (CUDA has none in float32), whether QKV is one MatMul, whether rotary runs inside GQA
GQA_DTYPES = {"cuda": ("f16", "bf16"), "dml": ("f16",), "webgpu": ("f16", "f32"), "cpu": ("f32",)}
PACKED_QKV = ("cuda", "webgpu", "cpu")
ROTARY_INSIDE = ("cuda", "webgpu", "cpu")  # DirectML: a separate RotaryEmbedding
DEFAULT_CONTEXT = 4096  # cos/sin cache rows when the config names no position limit


@dataclass
class EpReport:
    """What the EP rewrite did: per attention module, the form it got or why not."""

    ep: str
    attention: str = "Attention"
    gqa_modules: list[str] = field(default_factory=list)
    fallbacks: dict[str, str] = field(default_factory=dict)  # module -> reason
    packed_qkv: int = 0
    skip_norms: int = 0
    rotary_outside: list[str] = field(default_factory=list)  # 4-D blocks: GQA without do_rotary
    stored_weights: int = 0  # FusedMatMul(transB=1) by [out, in] weights (stored_weights.py)

    def to_json(self) -> dict[str, Any]:
        return {
            "ep": self.ep,
            "attention": self.attention,
            "group_query_attention": len(self.gqa_modules),
            "packed_qkv": self.packed_qkv,
            "rotary_outside_attention": self.rotary_outside,
            "skip_simplified_layer_norms": self.skip_norms,
            "linear_weights_as_stored": self.stored_weights,
            "generic_attention": self.fallbacks,
        }


def default_dtype(ep: str | None, dtype: str | None) -> str:
    """The build dtype: explicit ``dtype`` wins; else f16 on the GPU providers, f32 otherwise."""
    if dtype is not None:
        return dtype
    return "f16" if ep in GPU_EPS else "f32"


def check(ep: str | None) -> None:
    from mobius.errors import ConfigError

    if ep is not None and ep not in EPS:
        raise ConfigError(f"unknown execution provider '{ep}'; choose one of: {', '.join(EPS)}")


def apply(
    model: ir.Model,
    ep: str | None,
    hf_config: Any,
    dtype: str = "f16",
    *,
    pack: bool = True,
    quantized: bool = False,
) -> EpReport | None:
    """Rewrite ``model`` in place for ``ep`` (None: unchanged). ``pack=False`` (weights already
    quantized, GGUF/GPTQ/AWQ, placed by name after this) leaves ``--ep cpu``'s projections apart.
    ``quantized`` (``--precision``): ``--ep cpu`` takes GroupQueryAttention too (``_cpu``)."""
    if ep is None:
        return None
    report = EpReport(ep)
    if ep not in GPU_EPS and not (quantized and pack):
        return _cpu(model, report, pack)
    graph = model.graph
    attention = [n for n in graph if n.op_type == "Attention" and n.domain == ""]
    blocks: list[Block] = []
    for node in attention:
        found = find_block(node)
        if not isinstance(found, str) and dtype not in GQA_DTYPES[ep]:
            found = f"onnxruntime's {ep} GroupQueryAttention has no {dtype} kernel"
        if not isinstance(found, str) and ep == "cpu":
            found = _cpu_form(found)
        if isinstance(found, str):
            report.fallbacks[module_of(node)] = found
        else:
            blocks.append(found)
    mask = next((v for v in graph.inputs if v.name == "attention_mask"), None)
    if blocks and mask is None:
        for b in blocks:
            report.fallbacks[b.module] = "the graph has no attention_mask to derive lengths"
        blocks = []
    lens = gqa.lengths(graph, mask, blocks[0].attention) if blocks else None
    caches = _caches(model, blocks, hf_config, report, lens if ep == "cpu" else None)
    blocks = [b for b in blocks if b.rotary is None or id(b) in caches]
    positions = next((v for v in graph.inputs if v.name == "position_ids"), None)
    for block in blocks:
        inside = ep in ROTARY_INSIDE
        if block.four_d or (block.rotary is not None and not inside):
            report.rotary_outside.append(block.module)
        packed = gqa.replace_block(
            graph,
            block,
            lens,
            caches.get(id(block)),
            positions,
            pack=ep in PACKED_QKV,
            rotary_inside=inside,
        )
        report.packed_qkv += int(packed)
        report.gqa_modules.append(block.module)
    if ep == "cpu":  # blocks GQA cannot carry keep Attention, fed by packed q/k/v as in _cpu
        _pack_attention(graph, report)
        graph.sort()  # the computed caches and packed MatMuls go where their inputs are
    report.skip_norms = fuse_skip_norms(graph)
    gqa.remove_dead(graph)
    if report.gqa_modules:
        model.opset_imports.setdefault(gqa.MS, 1)
        report.attention = "GroupQueryAttention"
    if report.skip_norms:
        model.opset_imports.setdefault(gqa.MS, 1)
    for module, reason in report.fallbacks.items():  # on the CPU, Attention is no loss
        (log.info if ep == "cpu" else log.warning)(
            "--ep %s: %s keeps ONNX Attention: %s", ep, module, reason
        )
    return report


def _cpu_form(block: Block) -> Block | str:
    """The block, or why ``--ep cpu`` keeps its ONNX Attention: the 4-D layout (GQA would add
    transposes and remove nothing), or a head size onnxruntime's CPU GroupQueryAttention refuses
    (rotary inside wants ``cos_cache`` columns, half the head, a multiple of 8)."""
    if block.four_d:
        return "the 4-D layout (QK-norm or partial rotary): GQA would only add transposes"
    cache = block.attention.inputs[4].shape
    size = cache[3] if cache is not None and cache.rank() == 4 else None
    if not isinstance(size, int) or size % 16:
        return f"head size {size}: onnxruntime's CPU GroupQueryAttention wants a multiple of 16"
    return block


def _cpu(model: ir.Model, report: EpReport, pack: bool) -> EpReport:
    """``--ep cpu``: ONNX Attention kept; q/k/v packed into one MatMul and split, skip norms."""
    graph = model.graph
    if pack:
        _pack_attention(graph, report)
    if report.packed_qkv:
        graph.sort()  # the packed MatMul follows the last projection it replaces
    report.skip_norms = fuse_skip_norms(graph)
    gqa.remove_dead(graph)
    if report.skip_norms:
        model.opset_imports.setdefault(gqa.MS, 1)
    return report


def _pack_attention(graph: ir.Graph, report: EpReport) -> None:
    """The q/k/v projections of each ONNX ``Attention`` node as one MatMul and a ``Split``."""
    for node in [n for n in graph if n.op_type == "Attention" and n.domain == ""]:
        block = attention_inputs(node)
        report.packed_qkv += int(block is not None and pack_and_split(graph, block))


def _caches(
    model: ir.Model,
    blocks: list[Block],
    hf_config: Any,
    report: EpReport,
    computed: gqa.Lengths | None = None,
) -> dict[int, tuple[ir.Value, ir.Value]]:
    """One cos/sin cache pair per distinct table pair (block id -> pair): initializers, or with
    ``computed`` (``--ep cpu``) tables the graph computes for the mask's length
    (``gqa.computed_caches``); blocks whose tables cannot be cached are moved to
    ``report.fallbacks``."""
    from mobius.sources.config import position_limit

    rows = position_limit(hf_config) or DEFAULT_CONTEXT
    groups: dict[tuple[int, int], list[Block]] = {}  # read before any table is rewired
    for block in blocks:
        if block.rotary is not None:
            cos, sin = block.rotary[0].inputs[1:3]
            groups.setdefault((id(cos), id(sin)), []).append(block)
    out: dict[int, tuple[ir.Value, ir.Value]] = {}
    for i, members in enumerate(groups.values()):
        cos, sin = members[0].rotary[0].inputs[1:3]
        found: tuple | str | None = None
        if computed is not None:
            rotary = {n for b in members for n in b.rotary}
            found = gqa.computed_caches(
                model.graph, model.opset_imports, cos, sin, computed.total_int64, rotary, i
            )
            if isinstance(found, str):  # initializers instead, as for the GPU providers
                found = None
        if found is None:
            found = gqa.rotary_caches(model.graph, model.opset_imports, cos, sin, rows)
            if not isinstance(found, str):
                found = tuple(
                    _constant(model.graph, table, f"{kind}_cache{'' if i == 0 else f'_{i}'}")
                    for kind, table in zip(("cos", "sin"), found, strict=True)
                )
        for block in members:
            if isinstance(found, str):
                report.fallbacks[block.module] = found
            else:
                out[id(block)] = found
    return out


def _constant(graph: ir.Graph, array, name: str) -> ir.Value:
    tensor = ir.tensor(array, name=name)
    value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=tensor.shape)
    value.const_value = tensor
    graph.register_initializer(value)
    return value


def record(report: EpReport | None, explain: Any, texts: dict[str, str]) -> None:
    """Put the rewrite's outcome into explain (a ``gqa`` decline per module that kept ONNX
    Attention), ``mobius.json`` (``ep``) and ``genai_config.json`` (the provider)."""
    if report is None:
        return
    modules = {m.path: m for m in explain.modules}
    for module, reason in report.fallbacks.items():
        target = modules.get(module)
        if target is not None:
            target.declines.append(
                Decline("gqa", f"--ep {report.ep} keeps ONNX Attention: {reason}")
            )
    texts["explain.json"] = explain.to_json()
    info = json.loads(texts["mobius.json"])
    info["ep"] = report.to_json()
    texts["mobius.json"] = json.dumps(info, indent=2)
    if "genai_config.json" in texts:
        config = json.loads(texts["genai_config.json"])
        texts["genai_config.json"] = json.dumps(genai_for(config, report.ep), indent=2)


def genai_for(config: dict, ep: str) -> dict:
    """``genai_config.json`` for ``ep``: the provider in ``decoder.session_options``."""
    provider = GENAI_PROVIDERS.get(ep)
    options = config["model"]["decoder"]["session_options"]
    options["provider_options"] = [] if provider is None else [{provider: {}}]
    return config
