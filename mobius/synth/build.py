"""The synthesis driver: config -> task -> trace -> emit -> bind weights -> ModelPackage."""

from __future__ import annotations

import json
import logging
import os
import time

import torch

from mobius import config as config_mod
from mobius import source as source_mod
from mobius.errors import ConfigError
from mobius.package import ModelPackage
from mobius.registry import get_task
from mobius.synth.decompose import decompose_unlowered
from mobius.synth.emit import emit, unclaimed_attention
from mobius.synth.trace import trace
from mobius.weights import Checkpoint, WeightBinder

log = logging.getLogger("mobius")

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ConfigError(f"unknown dtype '{name}'; choose one of: {', '.join(DTYPES)}") from None


def build(
    src: str | os.PathLike,
    *,
    dtype: str = "f32",
    task: str | None = None,
    weights: bool = True,
    trust_remote_code: bool = False,
) -> ModelPackage:
    """Convert a checkpoint (local directory or hub id) into a ModelPackage."""
    torch_dtype = parse_dtype(dtype)
    started = time.perf_counter()
    source = source_mod.resolve(src, trust_remote_code=trust_remote_code, need_weights=weights)
    hf_config = config_mod.hf_config_from_dict(source.config, trust_remote_code=trust_remote_code)
    arch = config_mod.from_hf(hf_config)
    the_task = get_task(task, arch)
    checkpoint = Checkpoint(source.weight_files) if weights else None
    log.info("tracing %s as %s on the meta device", arch.model_type, the_task.name)
    traced = trace(arch, the_task, torch_dtype)
    use_cache = the_task.supports_cache
    unclaimed = unclaimed_attention(traced) if use_cache else []
    if unclaimed:
        # Layers that bypass the attention interface build their own masks, which the capture
        # switched off: trace again with transformers' own attention, and give up the cache.
        use_cache = False
        shown = ", ".join(unclaimed[:4]) + (
            f" and {len(unclaimed) - 4} more" if len(unclaimed) > 4 else ""
        )
        log.warning("building without a KV cache: attention not captured in %s", shown)
        fallback = tuple(i for i in the_task.attention_implementations if i != "mobius")
        traced = trace(arch, the_task, torch_dtype, fallback)
    traced.program = decompose_unlowered(traced.program)
    binder = WeightBinder(
        checkpoint,
        buffer_values=traced.buffer_values,
        tied_names=traced.tied_names,
        key_to_param=traced.key_to_param,
        constants=traced.constant_values,
    )
    model = emit(traced, binder, name=arch.model_type, use_cache=use_cache)
    unused = binder.unused_keys()
    if unused:
        shown = ", ".join(unused[:5]) + (f" and {len(unused) - 5} more" if len(unused) > 5 else "")
        log.warning("the checkpoint has %d tensors the model does not use: %s", len(unused), shown)
    model.metadata_props.update(
        {"mobius.model_type": arch.model_type, "mobius.task": the_task.name, "mobius.dtype": dtype}
    )
    log.info("built %d nodes in %.1f s", len(model.graph), time.perf_counter() - started)
    texts = {
        "mobius.json": json.dumps(
            {
                "model_type": arch.model_type,
                "task": the_task.name,
                "dtype": dtype,
                "kv_cache": use_cache,
                "inputs": [v.name for v in model.graph.inputs],
                "outputs": [v.name for v in model.graph.outputs],
            },
            indent=2,
        )
    }
    extra = [source.config_path, *source.extra_files()]
    return ModelPackage(model=model, extra_files=extra, texts=texts)
