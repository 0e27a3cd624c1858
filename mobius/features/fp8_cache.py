"""``fp8-kv-cache``: the key/value cache crosses the graph's boundary as float8 (e4m3fn).

``past_key_values.{i}.key/value`` and ``present.{i}.key/value`` become ``FLOAT8E4M3FN`` (a
quarter of float32's bytes, half of float16's); inside, the past is cast up to the compute dtype
before attention and the present cast down at the output (``Cast``, ``saturate=1``: values beyond
±448 clamp). Attention itself runs in the compute dtype. The cast loses at most half a unit in
the last place of e4m3's 3 mantissa bits: ``|x - q(x)| <= max(|x| * 2**-4, 2**-10)`` for
``|x| <= 448`` (2**-10 is half the subnormal spacing 2**-9).

onnxruntime-genai allocates only float32 / float16 caches, so no ``genai_config.json`` is written
for such a graph (the build log says so); mobius's own runtime (``mobius generate --runtime
onnxruntime``) drives it.
"""

from __future__ import annotations

import logging
import re

import onnx_ir as ir

from mobius.errors import ConfigError
from mobius.features.checks import require_causal_cache
from mobius.output.package import ModelPackage

log = logging.getLogger("mobius")

FP8 = ir.DataType.FLOAT8E4M3FN
_CACHE = re.compile(r"^(past_key_values|present)\.(\d+)\.(key|value)$")


def fp8_kv_cache(package: ModelPackage, options) -> None:
    require_causal_cache(package, "fp8-kv-cache")
    graph = package.model.graph
    pasts = [v for v in graph.inputs if _CACHE.match(v.name or "")]
    others = [
        v.name
        for v in graph.inputs
        if (v.name or "").startswith("past_key_values.") and v not in pasts
    ]
    if others:
        raise ConfigError(
            f"--features fp8-kv-cache: the cache also holds {others[0]}, which is not a key or "
            "value cache"
        )
    first = next(iter(graph))
    for past in pasts:
        dtype = past.dtype
        cast = ir.node("Cast", [past], {"to": dtype}, name=f"fp8_cache.{past.name}.Cast")
        cast.outputs[0].name = f"{past.name}.widened"
        cast.outputs[0].dtype, cast.outputs[0].shape = dtype, past.shape
        graph.insert_before(first, cast)
        for user, index in list(past.uses()):
            if user is not cast:
                user.replace_input_with(index, cast.outputs[0])
        past.dtype = FP8
    for i, present in enumerate(list(graph.outputs)):
        if not _CACHE.match(present.name or "") or present.dtype == FP8:
            continue
        name = present.name
        present.name = f"{name}.wide"
        cast = ir.node("Cast", [present], {"to": FP8, "saturate": 1}, name=f"fp8_cache.{name}.Cast")
        cast.outputs[0].name = name
        cast.outputs[0].dtype, cast.outputs[0].shape = FP8, present.shape
        graph.append(cast)
        graph.outputs[i] = cast.outputs[0]
    if package.texts.pop("genai_config.json", None) is not None:
        log.info("no genai_config.json: onnxruntime-genai has no float8 key/value cache")
