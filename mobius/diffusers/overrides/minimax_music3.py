"""MiniMax Music 3's condition encoder: its resampled length from the frame count as integers,
checked in the graph against the model's float arithmetic."""

from __future__ import annotations

import types
from typing import Any

import torch


def length_by_integers(module: torch.nn.Module) -> None:
    # MiniMaxMusic3ConditionEncoder resamples the frames to
    # `max(1, int(frames * out_rate / in_rate * in_hop / out_hop))` latent frames, a Python float
    # the trace fixes. The exact floor, `frames * out_rate * in_hop // (in_rate * out_hop)`, is a
    # symbolic size; it differs from the float at some frame counts (238 below 2e6 with the
    # default rates, the first at 9344; its pipeline calls it on windows of 200 frames at most).
    # The graph also computes the float formula, in float64 as Python does, and stops (a Gather
    # out of range) where the two differ, so every length it gives is the model's. The nearest
    # resampling is a gather at PyTorch's own source indices (`floor(i * (float)in / out)`,
    # in float32, clamped to the last frame), not a resize whose index rounding differs.
    module.forward = types.MethodType(_forward, module)


def _scalar(value: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.full((), value, dtype=dtype, device=device)


def float_length(frames: Any, cfg: Any, device: torch.device) -> torch.Tensor:
    """The model's ``max(1, int(...))`` of the frame count, in float64 operation by operation
    (tensors on both sides of each division: a scalar divisor may become a reciprocal)."""
    f64 = torch.float64
    value = _scalar(frames, f64, device) * cfg.output_sampling_rate
    value = value / _scalar(cfg.input_sampling_rate, f64, device) * cfg.input_hop_length
    value = value / _scalar(cfg.output_hop_length, f64, device)
    return torch.floor(value).long().clamp(min=1)


def _forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    cfg = self.config
    batch_size, num_frames, _ = hidden_states.shape
    hidden_states = hidden_states.transpose(1, 2)
    hidden_states = hidden_states.reshape(batch_size, cfg.num_condition_layers,
                                          cfg.condition_hidden_dim, num_frames)  # fmt: skip
    layer_weights = torch.softmax(self.layer_weight_logits, dim=0).to(hidden_states.dtype)
    hidden_states = torch.einsum("blht,l->bht", hidden_states, layer_weights)
    hidden_states = self.layer_scale.to(hidden_states.dtype) * hidden_states
    hidden_states = self.proj(hidden_states)

    device = hidden_states.device
    rate = cfg.output_sampling_rate * cfg.input_hop_length
    length = torch.sym_max(
        1, num_frames * rate // (cfg.input_sampling_rate * cfg.output_hop_length)
    )
    differs = (float_length(num_frames, cfg, device) - _scalar(length, torch.int64, device)).abs()
    check = hidden_states.new_zeros(1)[(2 * differs).view(1)].sum()  # out of range unless equal
    scale = _scalar(num_frames, torch.float32, device) / _scalar(length, torch.float32, device)
    source = torch.floor(torch.arange(length, device=device).float() * scale).long()
    source = source.clamp(max=num_frames - 1)
    hidden_states = hidden_states.index_select(2, source) + check
    return hidden_states.transpose(1, 2)
