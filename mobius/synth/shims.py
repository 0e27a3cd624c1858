"""Trace-time stand-ins for HF code that branches on tensor values, which torch.export cannot trace.

Each shim replaces a data-dependent Python branch with the same arithmetic done in the graph, so
the exported model computes what HF computes for every input, not just for the traced one.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch


def make_traceable(model: torch.nn.Module) -> torch.nn.Module:
    """Install every shim that applies to ``model``'s modules; returns the model."""
    from mobius.synth.overrides import install_overrides

    install_overrides(model)
    for module in model.modules():
        if getattr(module, "rope_type", None) == "dynamic" and hasattr(module, "inv_freq"):
            _dynamic_ntk_rope(module)
        layout = _looped_layout(module)
        if layout is not None:
            _gathered_experts(module, *layout(module))
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
def tracing_branches(model: torch.nn.Module, one_token: bool = False) -> Iterator[None]:
    """While tracing, take the branches that serve every input, not just the traced one.

    Gated delta-rule layers (qwen3_next and its kin) call ``torch.linalg.solve_triangular`` unless
    ``is_torchdynamo_exporting()``; when exporting they run a Python loop of ``chunk_size`` row
    updates, thousands of traced ops that take minutes to export. mobius lowers the solve without
    a loop (``lowering/triangular.py``), so in such modules that check answers False.

    With ``one_token`` (a step graph that ``token_loop.py`` also runs over a padded prefill), the
    recurrent layers' padding mask is kept for a single token too (``_padding_mask_per_token``).

    A module cast inside forward (``self.classifier = self.classifier.to(self.dtype)``: the
    routers of Switch Transformers and NLLB-MoE) becomes casts in the graph (``_cast_in_graph``).
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.nn.Module, "to", _cast_in_graph))
        for module in _modeling_modules(model):
            if _solves_unless_exporting(module):
                stack.enter_context(
                    mock.patch.object(module, "is_torchdynamo_exporting", lambda: False)
                )
            if one_token and _RECURRENT_MASK in vars(module):
                stack.enter_context(
                    mock.patch.object(module, _RECURRENT_MASK, _padding_mask_per_token)
                )
        yield


_RECURRENT_MASK = "create_recurrent_attention_mask"
_module_to = torch.nn.Module.to


def _cast_in_graph(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
    """``Module.to(dtype)`` while tracing: the module's floating tensors of another dtype are
    replaced by their casts, which the trace records; those already in ``dtype`` stay as they
    are (the cast is a no-op, as it is on a loaded model).

    ``nn.Module.to`` itself swaps each parameter for a new one, which torch.export's stand-in
    parameters refuse ("Couldn't swap Linear.weight"); the trace restores the module's own
    parameters when it ends. A move to another device or memory format is left to ``Module.to``.
    """
    device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
    if device is not None or memory_format is not None or dtype is None:
        return _module_to(self, *args, **kwargs)
    for module in self.modules():
        for store in (module._parameters, module._buffers):
            for name, tensor in store.items():
                if tensor is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                    store[name] = tensor.to(dtype)
    return self


def _padding_mask_per_token(
    config: Any, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None, **kwargs: Any
) -> torch.Tensor | None:
    """transformers' 2D padding mask for recurrent layers, also for a single-token call.

    transformers returns None for one token (a generated token is never padding), but a one-token
    step graph also runs the prefill token by token, where left padding must not reach the
    recurrent state; for a real decode token the mask is 1 and the product changes nothing.
    """
    if attention_mask is None or attention_mask.ndim != 2:
        return None
    return attention_mask[:, -inputs_embeds.shape[1] :]


@contextlib.contextmanager
def unchecked_distributions() -> Iterator[None]:
    """While tracing, ``torch.distributions`` does not check its arguments' values.

    A distribution built from traced tensors (BLT's ``Categorical(logits=...).entropy()``) checks
    them in Python (``(logits == logits).all()``, a NaN test): a branch on tensor values that
    torch.export cannot trace. The check only raises on invalid input and never changes a value.
    """
    previous = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        yield
    finally:
        torch.distributions.Distribution.set_default_validate_args(previous)


class ScalarFillsOnMeta(torch.overrides.TorchFunctionMode):
    """While tracing on meta, a 0-dim CPU tensor as ``masked_fill``'s value becomes its number.

    ``x.masked_fill(mask, torch.tensor(finfo.min))`` (DeBERTa-style ``XSoftmax`` in SEW-D) is
    legal on CPU, where a 0-dim CPU value goes with any device, but the meta kernel refuses the
    device mix. The value is a literal built in forward, so its number is the same fill."""

    FILLS = frozenset({torch.Tensor.masked_fill, torch.Tensor.masked_fill_, torch.masked_fill})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FILLS and len(args) == 3:
            target, mask, value = args
            if (
                isinstance(value, torch.Tensor)
                and value.dim() == 0
                and value.device.type == "cpu"
                and isinstance(target, torch.Tensor)
                and target.device.type == "meta"
            ):
                args = (target, mask, value.item())
        return func(*args, **kwargs)


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


EXPERTS_SIGNATURE = ["hidden_states", "top_k_index", "top_k_weights"]


def _is_looped_experts(module: torch.nn.Module) -> bool:
    """Fused experts (``gate_up_proj`` [E, 2I, H], ``down_proj`` [E', H, I]) whose class is not
    routed through transformers' experts interface (that sets ``has_gate``), so their forward loops
    over the experts some token picked: a loop of data-dependent length."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not isinstance(gate_up, torch.Tensor) or not isinstance(down, torch.Tensor):
        return False
    if hasattr(module, "has_gate") or not hasattr(module, "act_fn"):
        return False
    params = list(inspect.signature(type(module).forward).parameters)[1:]
    if params != EXPERTS_SIGNATURE or gate_up.dim() != 3 or down.dim() != 3:
        return False
    hidden, inner = down.shape[1], down.shape[2]
    shapes_match = gate_up.shape[1] == 2 * inner and gate_up.shape[2] == hidden
    # experts past the last down projection are zero-compute (identity) experts (LongCat-Flash)
    extra_ok = gate_up.shape[0] == down.shape[0] or hasattr(module, "identity_expert")
    return shapes_match and extra_ok


# (module, expert id per pick [N], the pick's token row [N, H]) -> that expert's output [N, H]
PickFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Layout = Callable[[torch.nn.Module], tuple[int, PickFn]]


def _fused_layout(module: torch.nn.Module) -> tuple[int, PickFn]:
    """``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I]: the gated MLP (the module's own
    ``_apply_gate`` when it has one, else ``act(gate) * up``) on gathered expert weights."""

    def gated(projected: torch.Tensor) -> torch.Tensor:
        if hasattr(module, "_apply_gate"):
            return module._apply_gate(projected)
        gate, up = projected.chunk(2, dim=-1)
        return module.act_fn(gate) * up

    def picks(ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        projected = torch.bmm(module.gate_up_proj[ids], x.unsqueeze(-1)).squeeze(-1)
        return torch.bmm(module.down_proj[ids], gated(projected).unsqueeze(-1)).squeeze(-1)

    return module.down_proj.shape[0], picks


def _dbrx_layout(module: torch.nn.Module) -> tuple[int, PickFn]:
    """DBRX: ``mlp.w1``/``mlp.v1``/``mlp.w2`` flat [E*I, H]; ``act(x w1^T) * (x v1^T)``, then ``@ w2``."""
    glu, shape = module.mlp, (-1, module.ffn_hidden_size, module.hidden_size)

    def picks(ids: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        w1, v1, w2 = (p.view(shape)[ids] for p in (glu.w1, glu.v1, glu.w2))  # [N, I, H] each
        gate = torch.bmm(w1, x.unsqueeze(-1)).squeeze(-1)
        up = torch.bmm(v1, x.unsqueeze(-1)).squeeze(-1)
        return torch.bmm((glu.activation_fn(gate) * up).unsqueeze(1), w2).squeeze(1)

    return module.num_experts, picks


# Looped experts whose weights are not in the fused layout, by class name: the layout cannot be
# read from parameter shapes alone (which flat tensor is the gate, which the transposed down).
LOOPED_LAYOUTS: dict[str, Layout] = {
    # three flat [E*I, H] tensors on a child GLU module, w2 applied untransposed
    "DbrxExperts": _dbrx_layout,
}


def _looped_layout(module: torch.nn.Module) -> Layout | None:
    """How to gather ``module``'s expert weights, if its forward loops over the picked experts."""
    layout = LOOPED_LAYOUTS.get(type(module).__name__)
    if layout is not None:
        params = list(inspect.signature(type(module).forward).parameters)[1:]
        return layout if params == EXPERTS_SIGNATURE else None
    return _fused_layout if _is_looped_experts(module) else None


def _gathered_experts(module: torch.nn.Module, routed: int, picks: PickFn) -> None:
    """The same experts computed for every (token, pick) pair with gathered expert weights.

    Each of a token's ``k`` picks runs its expert (``picks``), weighted by its routing weight, and
    the picks are summed: what the loop computes, in a fixed shape. A pick past the last routed
    expert passes the token through when the module has identity experts, and adds nothing
    otherwise (a sentinel the loop skips). The output has the input's shape (tokens may come
    flattened or as [batch, sequence, hidden]).
    """
    identity = hasattr(module, "identity_expert")

    def forward(hidden_states, top_k_index, top_k_weights):
        k = top_k_index.shape[-1]
        rows = hidden_states.reshape(-1, hidden_states.shape[-1])
        x = rows.unsqueeze(1).expand(-1, k, -1).reshape(-1, rows.shape[-1])
        ids = top_k_index.reshape(-1)
        out = picks(ids.clamp(max=routed - 1), x)
        past = (ids >= routed).unsqueeze(-1)
        out = torch.where(past, x if identity else torch.zeros_like(out), out)
        out = out * top_k_weights.reshape(-1, 1).to(out.dtype)
        out = out.view(rows.shape[0], k, -1).sum(1).to(hidden_states.dtype)
        return out.view(hidden_states.shape)

    module.forward = forward
