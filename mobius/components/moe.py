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
