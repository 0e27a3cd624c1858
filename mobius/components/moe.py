"""Mixture of experts: a router, stacked experts evaluated densely, and an optional shared expert.

Experts are stored as transformers 5 fuses them: ``experts.gate_up_proj`` ``[E, 2*I, H]`` (gate rows
first) and ``experts.down_proj`` ``[E, H, I]``. The router is the block's ``gate`` (``gate.weight``
``[E, H]``, DeepSeek's ``gate.e_score_correction_bias`` ``[E]``).

Cost of the dense formulation: every expert runs on every token (``E / top_k`` times the FLOPs of a
sparse dispatch, and an ``[E, tokens, 2*I]`` intermediate), then a ``[tokens, E]`` routing matrix that
is zero outside each token's top-k weights the expert outputs. It is exact, has no data-dependent
shapes, and reads each expert weight once per call, but it is the wrong choice for large ``E`` at
prefill; a sparse kernel (e.g. onnxruntime's ``com.microsoft.MoE``) is the faster path.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import Linear, weight_or_param
from mobius.components.mlp import GatedMLP, activation, check_activation

FLOAT = ir.DataType.FLOAT
INT64 = ir.DataType.INT64


def _ints(op, values: list[int]):
    return op.Constant(value=ir.tensor(values, dtype=INT64))


def _float(op, value: float):
    return op.Constant(value=ir.tensor(float(value), dtype=FLOAT))


def _routing_matrix(op, logits, indices, weights):
    """``[tokens, E]`` float32: ``weights`` at ``indices``, zero elsewhere."""
    return op.ScatterElements(_zeros_like(op, logits), indices, weights, axis=1)


def _zeros_like(op, x):
    """float32 zeros of ``x``'s shape."""
    return op.ConstantOfShape(op.Shape(x), value=ir.tensor([0.0], dtype=FLOAT))


class SoftmaxTopKRouter(nn.Module):
    """softmax over experts (float32), top-k, optionally renormalised to sum to 1.

    Mixtral renormalises (``normalize=True``); Qwen2-MoE follows ``norm_topk_prob``. Returns the
    ``[tokens, E]`` float32 routing matrix.
    """

    def __init__(
        self,
        hidden_size: int | None = None,
        num_experts: int | None = None,
        top_k: int = 2,
        normalize: bool = True,
        *,
        weight: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.top_k = top_k
        self.normalize = normalize
        self.weight = weight_or_param(
            weight, [num_experts, hidden_size], dtype, "SoftmaxTopKRouter.weight"
        )

    def forward(self, op, x):
        logits = op.MatMul(x, op.Transpose(self.weight, perm=[1, 0]))
        probs = op.Softmax(op.Cast(logits, to=FLOAT), axis=-1)
        values, indices = op.TopK(probs, _ints(op, [self.top_k]), axis=-1, _outputs=2)
        if self.normalize:
            values = op.Div(values, op.ReduceSum(values, _ints(op, [-1]), keepdims=1))
        return _routing_matrix(op, logits, indices, values)


class SigmoidGroupRouter(nn.Module):
    """DeepSeek-V3 routing: sigmoid scores, bias-corrected group-limited top-k.

    Experts are split into ``n_group`` groups; a group's score is the sum of its two best
    bias-corrected scores, the ``topk_group`` best groups stay eligible, and the ``top_k`` best
    eligible experts are chosen. Their weights are the uncorrected sigmoid scores, renormalised when
    ``norm_topk_prob`` (with HF's ``+1e-20``), times ``routed_scaling_factor``. Computed in float32.
    """

    def __init__(
        self,
        hidden_size: int | None = None,
        num_experts: int | None = None,
        top_k: int = 8,
        n_group: int = 1,
        topk_group: int = 1,
        routed_scaling_factor: float = 1.0,
        norm_topk_prob: bool = True,
        *,
        weight: ir.Value | None = None,
        e_score_correction_bias: ir.Value | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.num_experts = num_experts
        self.top_k = top_k
        self.n_group = n_group
        self.topk_group = topk_group
        self.routed_scaling_factor = routed_scaling_factor
        self.norm_topk_prob = norm_topk_prob
        self.weight = weight_or_param(
            weight, [num_experts, hidden_size], FLOAT, "SigmoidGroupRouter.weight"
        )
        self.e_score_correction_bias = weight_or_param(
            e_score_correction_bias,
            [num_experts],
            FLOAT,
            "SigmoidGroupRouter.e_score_correction_bias",
        )

    def forward(self, op, x):
        weight = op.Cast(self.weight, to=FLOAT)
        logits = op.MatMul(op.Cast(x, to=FLOAT), op.Transpose(weight, perm=[1, 0]))
        scores = op.Sigmoid(logits)
        choice = op.Add(scores, op.Cast(self.e_score_correction_bias, to=FLOAT))
        if self.n_group > 1 and self.topk_group < self.n_group:
            choice = self._limit_groups(op, choice)
        _, indices = op.TopK(choice, _ints(op, [self.top_k]), axis=-1, _outputs=2)
        values = op.GatherElements(scores, indices, axis=1)
        if self.norm_topk_prob:
            values = op.Div(
                values, op.Add(op.ReduceSum(values, _ints(op, [-1]), keepdims=1), _float(op, 1e-20))
            )
        if self.routed_scaling_factor != 1.0:
            values = op.Mul(values, _float(op, self.routed_scaling_factor))
        return _routing_matrix(op, logits, indices, values)

    def _limit_groups(self, op, choice):
        """Set the scores of experts outside the ``topk_group`` best groups to -inf."""
        if self.num_experts is None:
            raise ValueError("SigmoidGroupRouter needs num_experts for group-limited routing")
        per_group = self.num_experts // self.n_group
        grouped = op.Reshape(choice, _ints(op, [0, self.n_group, per_group]))  # [N, G, E/G]
        best_two, _ = op.TopK(grouped, _ints(op, [2]), axis=-1, _outputs=2)
        group_scores = op.ReduceSum(best_two, _ints(op, [-1]), keepdims=0)  # [N, G]
        _, groups = op.TopK(group_scores, _ints(op, [self.topk_group]), axis=-1, _outputs=2)
        ones = op.ConstantOfShape(op.Shape(groups), value=ir.tensor([1.0], dtype=FLOAT))
        group_mask = op.ScatterElements(
            _zeros_like(op, group_scores), groups, ones, axis=1
        )  # [N, G]
        mask = op.Expand(op.Unsqueeze(group_mask, _ints(op, [-1])), _ints(op, [1, 1, per_group]))
        mask = op.Cast(op.Reshape(mask, _ints(op, [0, self.num_experts])), to=ir.DataType.BOOL)
        return op.Where(mask, choice, _float(op, float("-inf")))


class Experts(nn.Module):
    """All experts on all tokens, weighted by the ``[tokens, E]`` routing matrix.

    ``x`` is ``[tokens, H]``. Expert ``e`` computes ``down[e] @ (act(gate) * up)`` with
    ``gate, up = split(gate_up_proj[e] @ x)``.
    """

    def __init__(
        self,
        num_experts: int | None = None,
        hidden_size: int | None = None,
        intermediate_size: int | None = None,
        activation: str = "silu",
        *,
        gate_up_proj: ir.Value | None = None,
        down_proj: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        check_activation(activation)
        self.activation = activation
        self.intermediate_size = intermediate_size
        self.gate_up_proj = weight_or_param(
            gate_up_proj,
            [
                num_experts,
                None if intermediate_size is None else 2 * intermediate_size,
                hidden_size,
            ],
            dtype,
            "Experts.gate_up_proj",
        )
        self.down_proj = weight_or_param(
            down_proj, [num_experts, hidden_size, intermediate_size], dtype, "Experts.down_proj"
        )

    def forward(self, op, x, routing):
        gate_up = op.MatMul(x, op.Transpose(self.gate_up_proj, perm=[0, 2, 1]))  # [E, N, 2I]
        gate, up = op.Split(gate_up, axis=-1, num_outputs=2, _outputs=2)
        hidden = op.Mul(activation(op, self.activation, gate), up)
        out = op.MatMul(hidden, op.Transpose(self.down_proj, perm=[0, 2, 1]))  # [E, N, H]
        weights = op.CastLike(
            op.Unsqueeze(op.Transpose(routing, perm=[1, 0]), _ints(op, [-1])), out
        )  # [E, N, 1]
        return op.ReduceSum(op.Mul(out, weights), _ints(op, [0]), keepdims=0)


class MoE(nn.Module):
    """Sparse MoE block: ``experts(x, gate(x)) [+ sigmoid(shared_expert_gate(x)) * shared_expert(x)]``.

    Takes ``[..., H]`` and returns the same shape. ``gate`` is a ``SoftmaxTopKRouter`` or
    ``SigmoidGroupRouter``. ``shared_expert`` is a ``GatedMLP`` kept under ``shared_name``
    (``"shared_expert"`` for Qwen2-MoE, ``"shared_experts"`` for DeepSeek). ``shared_expert_gate``
    (Qwen2-MoE) is a ``Linear`` ``[1, H]``, an existing weight value, or ``True`` to create one.
    """

    def __init__(
        self,
        gate: SoftmaxTopKRouter | SigmoidGroupRouter,
        experts: Experts,
        shared_expert: GatedMLP | None = None,
        shared_expert_gate: Linear | ir.Value | bool = False,
        *,
        hidden_size: int | None = None,
        shared_name: str = "shared_expert",
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.gate = gate
        self.experts = experts
        self.shared_name = shared_name if shared_expert is not None else None
        if shared_expert is not None:
            setattr(self, shared_name, shared_expert)
        if isinstance(shared_expert_gate, Linear):
            self.shared_expert_gate = shared_expert_gate
        elif isinstance(shared_expert_gate, ir.Value):
            self.shared_expert_gate = Linear(weight=shared_expert_gate)
        elif shared_expert_gate:
            self.shared_expert_gate = Linear(hidden_size, 1)
        else:
            self.shared_expert_gate = None

    def forward(self, op, x):
        shape = op.Shape(x)
        flat = op.Reshape(x, op.Concat(_ints(op, [-1]), op.Shape(x, start=-1), axis=0))  # [N, H]
        y = self.experts(op, flat, self.gate(op, flat))
        if self.shared_name is not None:
            shared = getattr(self, self.shared_name)(op, flat)
            if self.shared_expert_gate is not None:
                shared = op.Mul(op.Sigmoid(self.shared_expert_gate(op, flat)), shared)
            y = op.Add(y, shared)
        return op.Reshape(y, shape)


def gated(op, h, activation_name: str, alpha: float, beta: float, limit: float | None):
    """The gated activation of ``h`` ``[..., 2I]``: ``act(gate) * up`` over ``[gate | up]``, or
    ``swiglu`` over interleaved ``[g0, u0, g1, u1, ...]``:
    ``clamp(g, max=limit) * sigmoid(alpha * g) * (clamp(u, -limit, limit) + beta)``."""
    if activation_name != "swiglu":
        gate, up = op.Split(h, axis=-1, num_outputs=2, _outputs=2)
        return op.Mul(activation(op, activation_name, gate), up)
    pairs = op.Reshape(h, op.Concat(op.Shape(h, end=-1), _ints(op, [-1, 2]), axis=0))
    gate, up = op.Split(pairs, axis=-1, num_outputs=2, _outputs=2)
    gate, up = (op.Squeeze(t, _ints(op, [-1])) for t in (gate, up))
    if limit is not None:
        gate = op.Min(gate, op.CastLike(_float(op, limit), gate))
        up = op.Clip(up, op.CastLike(_float(op, -limit), up), op.CastLike(_float(op, limit), up))
    glu = op.Mul(gate, op.Sigmoid(op.Mul(gate, op.CastLike(_float(op, alpha), gate))))
    return op.Mul(glu, op.Add(up, op.CastLike(_float(op, beta), up)))


class SelectedExperts(nn.Module):
    """The chosen experts only: ``y[t] = sum_j w[t, j] * expert[index[t, j]](x[t])``.

    A decomposition for routers onnxruntime's ``MoE`` cannot express and for runtimes without it:
    each (token, choice) pair gathers its expert's matrices (``Gather`` on axis 0) and runs a
    batched MatMul, so a decode step reads ``top_k`` experts, not all of them. ``x`` is
    ``[tokens, H]``, ``index`` ``[tokens, k]`` int64, ``weights`` ``[tokens, k]``. The weights are
    the checkpoint's, unchanged: ``[E, 2I, H]`` / ``[E, H, I]``, or with ``transposed``
    ``[E, H, 2I]`` / ``[E, I, H]`` (GPT-OSS).
    """

    def __init__(
        self,
        activation: str = "silu",
        transposed: bool = False,
        alpha: float = 1.0,
        beta: float = 0.0,
        limit: float | None = None,
        *,
        gate_up_proj: ir.Value,
        down_proj: ir.Value,
        gate_up_bias: ir.Value | None = None,
        down_bias: ir.Value | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        if activation != "swiglu":
            check_activation(activation)
        self.activation = activation
        self.transposed = transposed
        self.alpha, self.beta, self.limit = alpha, beta, limit
        self.gate_up_proj, self.down_proj = gate_up_proj, down_proj
        self.gate_up_bias, self.down_bias = gate_up_bias, down_bias

    def _project(self, op, x, weight, bias, ids):
        """``x`` ``[S, in]`` through each row's expert -> ``[S, out]``."""
        w = op.Gather(weight, ids, axis=0)
        if self.transposed:  # [S, 1, in] @ [S, in, out]
            y = op.Squeeze(op.MatMul(op.Unsqueeze(x, _ints(op, [1])), w), _ints(op, [1]))
        else:  # [S, out, in] @ [S, in, 1]
            y = op.Squeeze(op.MatMul(w, op.Unsqueeze(x, _ints(op, [-1]))), _ints(op, [-1]))
        return y if bias is None else op.Add(y, op.Gather(bias, ids, axis=0))

    def forward(self, op, x, index, weights):
        ids = op.Reshape(index, _ints(op, [-1]))  # [S = tokens * k]
        k = op.Shape(index, start=1, end=2)
        rows = op.Reshape(
            op.Expand(
                op.Unsqueeze(x, _ints(op, [1])),
                op.Concat(_ints(op, [1]), k, _ints(op, [1]), axis=0),
            ),
            op.Concat(_ints(op, [-1]), op.Shape(x, start=-1), axis=0),
        )  # each token repeated k times, [S, H]
        h = self._project(op, rows, self.gate_up_proj, self.gate_up_bias, ids)
        h = gated(op, h, self.activation, self.alpha, self.beta, self.limit)
        y = self._project(op, h, self.down_proj, self.down_bias, ids)  # [S, H]
        y = op.Mul(y, op.CastLike(op.Reshape(weights, _ints(op, [-1, 1])), y))
        shape = op.Concat(_ints(op, [-1]), k, op.Shape(x, start=-1), axis=0)
        return op.ReduceSum(op.Reshape(y, shape), _ints(op, [1]), keepdims=0)


MS = "com.microsoft"


class FusedMoE(nn.Module):
    """onnxruntime's ``com.microsoft`` ``MoE``: routing and the chosen experts in one kernel.

    The kernel takes the router's logits ``[tokens, E]``, applies softmax, keeps the ``top_k``
    largest and, with ``normalize``, rescales them to sum to 1; so it models softmax-then-top-k
    routers, and top-k-then-softmax ones (the same weights as ``normalize``). The CPU kernel runs
    SwiGLU experts with the gate and up rows interleaved (``swiglu_fusion=1``): ``fc1`` is
    ``[E, 2I, H]`` in that order, ``fc2`` ``[E, H, I]``; silu-gated experts are ``alpha=1, beta=0``
    with no limit. ``x`` is ``[tokens, H]``.
    """

    def __init__(
        self,
        top_k: int,
        normalize: bool,
        alpha: float = 1.0,
        beta: float = 0.0,
        limit: float | None = None,
        *,
        fc1: ir.Value,
        fc2: ir.Value,
        fc1_bias: ir.Value | None = None,
        fc2_bias: ir.Value | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.top_k, self.normalize = top_k, normalize
        self.alpha, self.beta, self.limit = alpha, beta, limit
        self.fc1, self.fc2, self.fc1_bias, self.fc2_bias = fc1, fc2, fc1_bias, fc2_bias

    def forward(self, op, x, router_logits):
        attributes = {
            "k": self.top_k,
            "activation_type": "swiglu",
            "swiglu_fusion": 1,
            "normalize_routing_weights": int(self.normalize),
            "activation_alpha": float(self.alpha),
            "activation_beta": float(self.beta),
        }
        if self.limit is not None:
            attributes["swiglu_limit"] = float(self.limit)
        inputs = [
            x,
            op.CastLike(router_logits, x),
            self.fc1,
            self.fc1_bias,
            self.fc2,
            self.fc2_bias,
        ]
        return op.MoE(*inputs, _domain=MS, _version=1, **attributes)
