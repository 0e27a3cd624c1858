"""Rotary position embeddings: cos/sin tables from ``position_ids`` and their application to q/k.

``rope_parameters`` turns an HF ``rope_parameters`` dict into plain numbers (numpy, no torch) for the
types default, linear, dynamic, llama3, yarn and longrope. The tables are ``[batch, seq, rotary_dim/2]``,
the 3-D cache shape that ONNX ``RotaryEmbedding``-23 takes when it is given no ``position_ids``.

What is exact at runtime, compared with HF's rotary embedding modules:

- default, linear, llama3, yarn: static ``inv_freq``; exact for every length.
- longrope: ``RotaryTable`` switches between the short and long ``inv_freq`` with a ``Where`` on
  ``max(position_ids) + 1 > original_max_position_embeddings``, exactly as HF does per call.
- dynamic (NTK): ``DynamicRotaryTable`` recomputes the base from ``L = max(max(position_ids) + 1,
  max_position_embeddings)`` on every call. HF's module is stateful: it only grows its cached length
  and resets when a call is shorter than ``max_position_embeddings``. The two agree on every call as
  long as the lengths seen after the first long call never decrease while staying above
  ``max_position_embeddings`` (the normal prefill-then-decode order); after a long call followed by
  a shorter-but-still-long call, HF keeps the larger base and this component does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript import nn

FLOAT = ir.DataType.FLOAT
INT64 = ir.DataType.INT64

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


@dataclass(frozen=True)
class DynamicNTK:
    """What dynamic NTK scaling needs at runtime: ``base`` is re-derived from the sequence length."""

    base: float
    factor: float
    max_position_embeddings: int


@dataclass(frozen=True)
class RopeParameters:
    """Plain-number rotary parameters.

    ``inv_freq`` is ``[rotary_dim/2]`` float32 (for longrope the short factors, for dynamic the value at
    ``max_position_embeddings``). ``long_inv_freq`` and ``original_max_position_embeddings`` are set for
    longrope; ``dynamic`` for dynamic NTK.
    """

    inv_freq: np.ndarray
    attention_scaling: float = 1.0
    long_inv_freq: np.ndarray | None = None
    original_max_position_embeddings: int | None = None
    dynamic: DynamicNTK | None = None

    @property
    def rotary_dim(self) -> int:
        return 2 * int(self.inv_freq.shape[0])


def _base_inv_freq(base: float, dim: int) -> np.ndarray:
    """``1 / base^(2i/dim)`` in float32, in the same order of operations as HF."""
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    return (np.float32(1.0) / np.power(np.float32(base), exponent)).astype(np.float32)


def rope_parameters(
    rope: dict[str, Any], head_dim: int, max_position_embeddings: int | None = None
) -> RopeParameters:
    """Compute ``inv_freq`` and ``attention_scaling`` from an HF ``config.rope_parameters`` dict.

    ``rope`` holds ``rope_type`` (default ``"default"``), ``rope_theta``, optionally
    ``partial_rotary_factor`` and the type's own keys (``factor``, ``original_max_position_embeddings``,
    ``low_freq_factor``/``high_freq_factor``, ``beta_fast``/``beta_slow``/``mscale``/``mscale_all_dim``/
    ``attention_factor``/``truncate``, ``short_factor``/``long_factor``).
    """
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type {rope_type!r} is not supported; supported: {ROPE_TYPES}")
    base = float(rope["rope_theta"])
    dim = int(head_dim * rope.get("partial_rotary_factor", 1.0))
    original = rope.get("original_max_position_embeddings") or max_position_embeddings
    inv_freq = _base_inv_freq(base, dim)

    if rope_type == "default":
        return RopeParameters(inv_freq)
    if rope_type == "linear":
        return RopeParameters((inv_freq / np.float32(rope["factor"])).astype(np.float32))
    if rope_type == "dynamic":
        if max_position_embeddings is None:
            raise ValueError("dynamic rope needs max_position_embeddings")
        return RopeParameters(
            inv_freq, dynamic=DynamicNTK(base, float(rope["factor"]), max_position_embeddings)
        )
    if rope_type == "llama3":
        return RopeParameters(_llama3(inv_freq, rope))
    if rope_type == "yarn":
        return _yarn(rope, base, dim, original, max_position_embeddings)
    return _longrope(rope, base, dim, original, max_position_embeddings)


def _llama3(inv_freq: np.ndarray, rope: dict[str, Any]) -> np.ndarray:
    factor = rope["factor"]
    low, high = rope["low_freq_factor"], rope["high_freq_factor"]
    old_context = rope["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = (2 * math.pi / inv_freq).astype(np.float32)
    scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(factor), inv_freq).astype(
        np.float32
    )
    smooth = ((old_context / wavelen - low) / (high - low)).astype(np.float32)
    smoothed = (1 - smooth) * scaled / np.float32(factor) + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn(
    rope: dict[str, Any], base: float, dim: int, original: int, max_positions: int | None
) -> RopeParameters:
    factor = rope.get("factor") or max_positions / original
    attention = rope.get("attention_factor")
    mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")

    def get_mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention is None:
        attention = (
            get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
            if mscale and mscale_all_dim
            else get_mscale(factor)
        )
    beta_fast = rope.get("beta_fast") or 32
    beta_slow = rope.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rope.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = np.clip(
        (np.arange(dim // 2, dtype=np.float32) - np.float32(low)) / np.float32(high - low), 0, 1
    )
    extrapolation = (1 - ramp).astype(np.float32)
    pos_freqs = np.power(
        np.float32(base), np.arange(0, dim, 2).astype(np.float32) / np.float32(dim)
    )
    inv_extra = np.float32(1.0) / pos_freqs
    inv_inter = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    inv_freq = inv_inter * (1 - extrapolation) + inv_extra * extrapolation
    return RopeParameters(inv_freq.astype(np.float32), float(attention))


def _longrope(
    rope: dict[str, Any], base: float, dim: int, original: int, max_positions: int | None
) -> RopeParameters:
    factor = rope.get("factor") or max_positions / original
    attention = rope.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    shape = np.power(
        np.float32(base), np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    )

    def inv(factors: list[float]) -> np.ndarray:
        return (np.float32(1.0) / (np.asarray(factors, dtype=np.float32) * shape)).astype(
            np.float32
        )

    return RopeParameters(
        inv(rope["short_factor"]), float(attention), inv(rope["long_factor"]), int(original)
    )


def _tables(op, position_ids, inv_freq, attention_scaling: float, dtype: ir.DataType):
    """cos and sin of ``position_ids[..., None] * inv_freq``, scaled, cast to ``dtype``."""
    positions = op.Unsqueeze(
        op.Cast(position_ids, to=FLOAT), op.Constant(value=ir.tensor([-1], dtype=INT64))
    )
    freqs = op.Mul(positions, inv_freq)
    cos, sin = op.Cos(freqs), op.Sin(freqs)
    if attention_scaling != 1.0:
        scale = op.Constant(value=ir.tensor(float(attention_scaling), dtype=FLOAT))
        cos, sin = op.Mul(cos, scale), op.Mul(sin, scale)
    if dtype != FLOAT:
        cos, sin = op.Cast(cos, to=dtype), op.Cast(sin, to=dtype)
    return cos, sin


def _runtime_length(op, position_ids):
    """``max(position_ids) + 1`` as a scalar int64, HF's notion of the current sequence length."""
    top = op.ReduceMax(position_ids, keepdims=0)
    return op.Add(top, op.Constant(value=ir.tensor(1, dtype=INT64)))


class RotaryTable(nn.Module):
    """cos, sin ``[batch, seq, rotary_dim/2]`` from ``position_ids`` ``[batch, seq]`` (int64).

    ``inv_freq`` is ``[rotary_dim/2]`` float32; an existing value, or a Parameter named ``inv_freq``
    (HF keeps it as a non-persistent buffer, so give it data, see ``from_parameters``). With
    ``original_max_position_embeddings`` set (longrope), ``long_inv_freq`` replaces ``inv_freq`` when
    ``max(position_ids) + 1`` exceeds it.
    """

    def __init__(
        self,
        rotary_dim: int | None = None,
        attention_scaling: float = 1.0,
        original_max_position_embeddings: int | None = None,
        *,
        inv_freq: ir.Value | None = None,
        long_inv_freq: ir.Value | None = None,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.attention_scaling = attention_scaling
        self.original_max_position_embeddings = original_max_position_embeddings
        self.dtype = dtype
        half = None if rotary_dim is None else rotary_dim // 2
        self.inv_freq = inv_freq if inv_freq is not None else _param(half, "inv_freq")
        if original_max_position_embeddings is not None:
            self.long_inv_freq = (
                long_inv_freq if long_inv_freq is not None else _param(half, "long_inv_freq")
            )
        else:
            self.long_inv_freq = None

    @classmethod
    def from_parameters(
        cls, params: RopeParameters, dtype: ir.DataType = FLOAT, name: str | None = None
    ) -> RotaryTable | DynamicRotaryTable:
        """The table module for ``params``, with its frequency vectors as Parameters holding data."""
        if params.dynamic is not None:
            d = params.dynamic
            return DynamicRotaryTable(
                params.rotary_dim,
                d.base,
                d.factor,
                d.max_position_embeddings,
                params.attention_scaling,
                dtype=dtype,
                name=name,
            )
        long = params.long_inv_freq
        return cls(
            params.rotary_dim,
            params.attention_scaling,
            params.original_max_position_embeddings,
            inv_freq=nn.Parameter(params.inv_freq.shape, data=ir.tensor(params.inv_freq)),
            long_inv_freq=None if long is None else nn.Parameter(long.shape, data=ir.tensor(long)),
            dtype=dtype,
            name=name,
        )

    def forward(self, op, position_ids):
        inv_freq = self.inv_freq
        if self.long_inv_freq is not None:
            limit = op.Constant(
                value=ir.tensor(int(self.original_max_position_embeddings), dtype=INT64)
            )
            inv_freq = op.Where(
                op.Greater(_runtime_length(op, position_ids), limit), self.long_inv_freq, inv_freq
            )
        return _tables(op, position_ids, inv_freq, self.attention_scaling, self.dtype)


class DynamicRotaryTable(nn.Module):
    """Dynamic-NTK cos/sin tables: the base grows with the runtime length (see the module docstring).

    ``base' = base * (factor * L / max_pos - (factor - 1)) ^ (dim / (dim - 2))`` with
    ``L = max(max(position_ids) + 1, max_pos)``, then ``inv_freq = 1 / base' ^ (2i / dim)``, all in float32.
    """

    def __init__(
        self,
        rotary_dim: int,
        base: float,
        factor: float,
        max_position_embeddings: int,
        attention_scaling: float = 1.0,
        *,
        dtype: ir.DataType = FLOAT,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.rotary_dim = rotary_dim
        self.base = base
        self.factor = factor
        self.max_position_embeddings = max_position_embeddings
        self.attention_scaling = attention_scaling
        self.dtype = dtype

    def forward(self, op, position_ids):
        def const(v):
            return op.Constant(value=ir.tensor(v, dtype=FLOAT))

        dim = self.rotary_dim
        length = op.Max(
            _runtime_length(op, position_ids),
            op.Constant(value=ir.tensor(self.max_position_embeddings, dtype=INT64)),
        )
        ratio = op.Div(
            op.Mul(const(float(self.factor)), op.Cast(length, to=FLOAT)),
            const(float(self.max_position_embeddings)),
        )
        stretch = op.Pow(op.Sub(ratio, const(float(self.factor - 1))), const(dim / (dim - 2)))
        base = op.Mul(const(float(self.base)), stretch)
        exponent = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
        inv_freq = op.Reciprocal(op.Pow(base, const(exponent)))
        return _tables(op, position_ids, inv_freq, self.attention_scaling, self.dtype)


def _param(half: int | None, what: str) -> nn.Parameter:
    if half is None:
        raise ValueError(f"RotaryTable: give rotary_dim or an existing {what} value")
    return nn.Parameter([half], dtype=FLOAT)


class ApplyRotary(nn.Module):
    """Rotate q or k with ONNX ``RotaryEmbedding``-23.

    ``x`` is ``[batch, heads, seq, head_dim]``, or packed ``[batch, seq, heads * head_dim]`` when
    ``num_heads`` is given. ``cos``/``sin`` are ``[batch, seq, rotary_dim/2]`` (``RotaryTable``).
    ``rotary_dim`` < head_dim rotates only the first ``rotary_dim`` channels (Phi, StableLM, GPT-NeoX
    partial rotary); 0 or ``None`` means all. ``interleaved`` selects the GPT-J layout (pairs
    ``(2i, 2i+1)``) instead of the Llama halves layout (pairs ``(i, i + d/2)``).
    """

    def __init__(
        self,
        rotary_dim: int | None = None,
        interleaved: bool = False,
        num_heads: int | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.rotary_dim = rotary_dim or 0
        self.interleaved = interleaved
        self.num_heads = num_heads

    def forward(self, op, x, cos, sin):
        attrs: dict[str, int] = {"interleaved": int(self.interleaved)}
        if self.rotary_dim:
            attrs["rotary_embedding_dim"] = int(self.rotary_dim)
        if self.num_heads:
            attrs["num_heads"] = int(self.num_heads)
        return op.RotaryEmbedding(x, cos, sin, **attrs)
