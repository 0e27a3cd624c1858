"""MoE experts, captured through transformers' experts interface rather than matched op by op.

transformers 5 routes every ``@use_experts_implementation`` experts module through
``ALL_EXPERTS_FUNCTIONS``; registering ``mobius`` there makes each experts call one traced
``mobius::experts`` node that carries its weights, its gate function and its layout. The gate
function is identified by evaluating it (``_apply_gate`` with ``act_fn``) on random values against
the forms the op knows: a gated activation over ``[gate | up]`` (silu, gelu, gelu_tanh, relu), or
GPT-OSS's clamped SwiGLU over interleaved ``[g0, u0, g1, u1, ...]``. A module the op cannot model
(no gate, a post-expert norm, expert parallelism, a gate of its own) runs transformers' ``batched_mm``
path, which is lowered op by op, and the reason is kept for ``explain`` (``DECLINED``).

``patterns/moe.py`` claims the node together with its router; an unclaimed node is emitted by
``emit_experts`` as the compact decomposition (``SelectedExperts``).
"""

from __future__ import annotations

import math

import torch
import torch.fx

from lowering.context import LoweringContext
from mobius import failures
from mobius.components.moe import SelectedExperts
from patterns.registry import emits

IMPLEMENTATION = "mobius"
# experts class name -> why its calls were left to batched_mm (read by patterns/moe.py)
DECLINED: dict[str, str] = {}
GATED = ("silu", "gelu", "gelu_tanh", "relu")
NO_LIMIT = math.inf


@torch.library.custom_op("mobius::experts", mutates_args=())
def experts_op(
    hidden: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    gate_up_bias: torch.Tensor | None,
    down_bias: torch.Tensor | None,
    activation: str,
    transposed: bool,
    alpha: float,
    beta: float,
    limit: float,
) -> torch.Tensor:
    """Reference semantics: token ``t`` gets ``sum_j w[t, j] * expert[index[t, j]](x[t])``.

    ``activation`` is one of ``GATED`` over ``[gate | up]``, or ``swiglu`` (interleaved gate and
    up, ``clamp(g, max=limit) * sigmoid(alpha * g) * (clamp(u, -limit, limit) + beta)``).
    ``transposed``: weights stored ``[E, in, out]`` rather than ``[E, out, in]``."""
    ids = top_k_index.reshape(-1)
    x = hidden.repeat_interleave(top_k_index.shape[-1], dim=0)
    w1, w2 = gate_up_proj[ids], down_proj[ids]
    h = (x.unsqueeze(1) @ w1).squeeze(1) if transposed else (w1 @ x.unsqueeze(-1)).squeeze(-1)
    if gate_up_bias is not None:
        h = h + gate_up_bias[ids]
    a = gate(h, activation, alpha, beta, limit)
    y = (a.unsqueeze(1) @ w2).squeeze(1) if transposed else (w2 @ a.unsqueeze(-1)).squeeze(-1)
    if down_bias is not None:
        y = y + down_bias[ids]
    y = y * top_k_weights.reshape(-1, 1)
    return y.view(*top_k_index.shape, -1).sum(dim=1).to(hidden.dtype)


@experts_op.register_fake
def _experts_shape(hidden, top_k_index, top_k_weights, *rest):
    return hidden.new_empty(hidden.shape)


def gate(h: torch.Tensor, activation: str, alpha: float, beta: float, limit: float) -> torch.Tensor:
    """The gated activation of the op (see ``experts_op``)."""
    if activation == "swiglu":
        g, u = h[..., ::2], h[..., 1::2]
        g = g.clamp(max=limit)
        u = u.clamp(min=-limit, max=limit)
        return g * torch.sigmoid(alpha * g) * (u + beta)
    g, u = h.chunk(2, dim=-1)
    act = {
        "silu": torch.nn.functional.silu,
        "gelu": torch.nn.functional.gelu,
        "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
        "relu": torch.relu,
    }[activation]
    return act(g) * u


def identify_gate(module: torch.nn.Module) -> tuple[str, float, float, float] | str:
    """(activation, alpha, beta, limit) that reproduce ``module._apply_gate``, or why none does."""
    probe = torch.randn(3, 16, generator=torch.Generator().manual_seed(0)) * 6
    try:
        with torch.no_grad():
            expected = module._apply_gate(probe)
    except Exception as exc:  # a gate that cannot run on a plain CPU tensor
        failures.raise_if_fatal(exc)  # an interrupt or out-of-memory is not a decline
        return f"the experts' gate function cannot be evaluated on its own ({type(exc).__name__})"
    candidates = [(name, 1.0, 0.0, NO_LIMIT) for name in GATED]
    alpha, limit = getattr(module, "alpha", None), getattr(module, "limit", None)
    if isinstance(alpha, (int, float)) and isinstance(limit, (int, float)):
        candidates.append(("swiglu", float(alpha), 1.0, float(limit)))
    for candidate in candidates:
        found = gate(probe, *candidate)
        if found.shape == expected.shape and torch.allclose(found, expected, atol=1e-6, rtol=1e-6):
            return candidate
    return "the experts' gate function is none of " + ", ".join([*GATED, "clamped swiglu"])


def decline_reason(module: torch.nn.Module) -> str | None:
    """Why this experts module cannot be one mobius::experts op (None when it can)."""
    if getattr(module, "_is_expert_parallel", False):
        return "expert parallelism is not modelled"
    if not getattr(module, "has_gate", True):
        return "ungated experts (up_proj and an activation) are not modelled"
    if getattr(module, "has_post_expert_norm", False):
        return "a norm after each expert is not modelled"
    return None


def prepare(model: torch.nn.Module) -> None:
    """Decide, before tracing, how each experts module of ``model`` is called: the gate function
    is probed on real values here, where no fake tensors are about."""
    for module in model.modules():
        if hasattr(module, "_apply_gate") and hasattr(module, "gate_up_proj"):
            reason = decline_reason(module)
            module._mobius_experts = identify_gate(module) if reason is None else reason


def mobius_experts_forward(
    module: torch.nn.Module,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The function registered in transformers' experts interface under the name ``mobius``."""
    found = getattr(module, "_mobius_experts", "the experts were not prepared before tracing")
    if isinstance(found, str):
        from transformers.integrations.moe import batched_mm_experts_forward

        DECLINED[type(module).__name__] = found
        return batched_mm_experts_forward(module, hidden_states, top_k_index, top_k_weights)
    activation, alpha, beta, limit = found
    return torch.ops.mobius.experts(
        hidden_states,
        top_k_index,
        top_k_weights,
        module.gate_up_proj,
        module.down_proj,
        module.gate_up_proj_bias if module.has_bias else None,
        module.down_proj_bias if module.has_bias else None,
        activation,
        bool(module.is_transposed),
        alpha,
        beta,
        limit,
    )


def install() -> None:
    """Register the ``mobius`` experts implementation with transformers (idempotent)."""
    from transformers.integrations.moe import ExpertsInterface

    ExpertsInterface.register(IMPLEMENTATION, mobius_experts_forward)


OP = torch.ops.mobius.experts.default


def selected_experts(ctx: LoweringContext, node: torch.fx.Node) -> SelectedExperts:
    """The decomposition component for a captured experts node."""
    _, _, _, w1, w2, b1, b2, activation, transposed, alpha, beta, limit = node.args
    return SelectedExperts(
        activation=activation,
        transposed=transposed,
        alpha=alpha,
        beta=beta,
        limit=None if math.isinf(limit) else limit,
        gate_up_proj=ctx.value(w1),
        down_proj=ctx.value(w2),
        gate_up_bias=None if b1 is None else ctx.value(b1),
        down_bias=None if b2 is None else ctx.value(b2),
        name="experts",
    )


@emits(OP)
def emit_experts(ctx: LoweringContext, node: torch.fx.Node):
    """An experts call no MoE pattern claimed: only the selected experts' rows are computed."""
    hidden, index, weights = (ctx.value(a) for a in node.args[:3])
    return selected_experts(ctx, node)(ctx.op, hidden, index, weights)
