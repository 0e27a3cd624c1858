"""Trace-time stand-ins for HF code that branches on tensor values, which torch.export cannot trace.

Each shim replaces a data-dependent Python branch with the same arithmetic done in the graph, so
the exported model computes what HF computes for every input, not just for the traced one.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

import torch


def make_traceable(model: torch.nn.Module) -> torch.nn.Module:
    """Install every shim that applies to ``model``'s modules; returns the model."""
    for module in model.modules():
        if getattr(module, "rope_type", None) == "dynamic" and hasattr(module, "inv_freq"):
            _dynamic_ntk_rope(module)
    return model


def _dynamic_ntk_rope(module: torch.nn.Module) -> None:
    """Dynamic-NTK rope: the base grows with the longest position seen in this call.

    HF recomputes ``inv_freq`` in Python when ``max(position_ids) + 1`` exceeds the cached length;
    here the same formula runs in the graph on ``L = max(max(position_ids) + 1, max_positions)``,
    which gives the original frequencies whenever ``L`` is within the trained length. (HF also
    keeps a grown base for later shorter calls above the trained length; a fresh call here uses
    that call's own length.)
    """
    config = module.config
    params: dict[str, Any] = config.rope_parameters
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    partial = (
        params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0)) or 1.0
    )
    dim = int(head_dim * partial)
    base, factor = float(params["rope_theta"]), float(params["factor"])
    max_positions = int(config.max_position_embeddings)

    def recompute(mod: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        position_ids = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        length = torch.clamp(position_ids.max() + 1, min=max_positions).to(torch.float64)
        grown = base * ((factor * length / max_positions) - (factor - 1)) ** (dim / (dim - 2))
        exponents = (
            torch.arange(0, dim, 2, dtype=torch.int64, device=position_ids.device).float() / dim
        )
        inv_freq = 1.0 / (grown.float() ** exponents)
        object.__setattr__(mod, "inv_freq", inv_freq)  # shadows the buffer for this call only

    module.rope_type = "default"  # the decorator's Python-side update must not run
    module.register_forward_pre_hook(recompute, with_kwargs=True)


@contextlib.contextmanager
def tracing_branches(model: torch.nn.Module) -> Iterator[None]:
    """While tracing, let modeling code that has a triangular solve use it instead of its loop.

    Gated delta-rule layers (qwen3_next and its kin) call ``torch.linalg.solve_triangular`` unless
    ``is_torchdynamo_exporting()``; when exporting they run a Python loop of ``chunk_size`` row
    updates, thousands of traced ops that take minutes to export. mobius lowers the solve without
    a loop (``lowering/triangular.py``), so in such modules that check answers False.
    """
    with contextlib.ExitStack() as stack:
        for module in _modeling_modules(model):
            if _solves_unless_exporting(module):
                stack.enter_context(
                    mock.patch.object(module, "is_torchdynamo_exporting", lambda: False)
                )
        yield


def _modeling_modules(model: torch.nn.Module) -> set[Any]:
    names = {type(m).__module__ for m in model.modules()}
    return {sys.modules[n] for n in names if n in sys.modules}


@functools.cache
def _solves_unless_exporting(module: Any) -> bool:
    if "is_torchdynamo_exporting" not in vars(module):
        return False
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return False
    return "solve_triangular" in source
