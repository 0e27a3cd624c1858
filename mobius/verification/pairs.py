"""One output as the converted package and the PyTorch model computed it, on the same inputs.

``mobius.testing``'s parity helpers (``parity``, ``seq2seq``, ``vlm``) make these; the tests take
their largest absolute difference, ``mobius verify`` its full set of numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Pair:
    """One output of one graph call: onnxruntime's array and PyTorch's, same shape.

    ``keep`` is a boolean mask over the leading axes (the positions that carry real tokens); the
    others are left out of every number. ``scores``: the last axis holds scores over classes or
    the vocabulary, so the argmax of each row can be compared."""

    graph: str
    output: str
    call: str
    actual: np.ndarray
    expected: np.ndarray
    keep: np.ndarray | None = None
    scores: bool = False

    def __post_init__(self) -> None:
        self.actual = np.asarray(self.actual).astype(np.float32)
        self.expected = np.asarray(self.expected).astype(np.float32)
        if self.actual.shape != self.expected.shape:
            raise AssertionError(
                f"{self.graph} {self.output} ({self.call}): onnxruntime gives shape "
                f"{self.actual.shape}, PyTorch {self.expected.shape}"
            )

    def kept(self) -> tuple[np.ndarray, np.ndarray]:
        """(actual, expected) at the kept positions: ``[positions, ...]``, or as they are."""
        if self.keep is None:
            return self.actual, self.expected
        keep = np.asarray(self.keep, dtype=bool)
        return self.actual[keep], self.expected[keep]

    def max_abs(self) -> float:
        """Largest |onnxruntime - PyTorch| over the kept positions (0 when nothing is kept)."""
        actual, expected = self.kept()
        return float(np.abs(actual - expected).max()) if actual.size else 0.0


@dataclass
class Tokens:
    """Greedy tokens ``[batch, steps]``: the package's (``actual``) and HF ``generate``'s."""

    graph: str
    actual: np.ndarray
    expected: np.ndarray

    def equal(self) -> bool:
        return bool(np.array_equal(self.actual, self.expected))


@dataclass
class Comparison:
    """What one parity run compared: outputs, and the greedy tokens of a generative task."""

    pairs: list[Pair]
    tokens: Tokens | None = None
    judged: bool = True  # False: reported only
    note: str = ""  # what differs from a plain comparison (the weights PyTorch ran with)
    float_weights: bool = False  # a quantized package against the checkpoint's float weights


def to_numpy(value: torch.Tensor) -> np.ndarray:
    """A tensor as float32 (or integer) numpy, whatever its dtype (numpy has no bfloat16)."""
    value = value.detach()
    return (value.float() if value.is_floating_point() else value).cpu().numpy()


def for_torch(model: torch.nn.Module, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``feeds`` with floating inputs in ``model``'s dtype (a half-precision checkpoint)."""
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return {
        k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in feeds.items()
    }


ONNX_FLOATS = {"tensor(float16)": np.float16, "tensor(float)": np.float32}
ONNX_INTEGERS = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


def for_session(session, feeds: dict) -> dict[str, np.ndarray]:
    """``feeds`` as numpy, floating and integer inputs in the type each graph input declares
    (f16 graphs; a processor's int32 masks), limited to the session's inputs."""
    types = {i.name: i.type for i in session.get_inputs()}
    out = {}
    for name, value in feeds.items():
        if name not in types:
            continue
        array = to_numpy(value) if isinstance(value, torch.Tensor) else np.asarray(value)
        if array.dtype.kind == "f" and types[name] in ONNX_FLOATS:
            array = array.astype(ONNX_FLOATS[types[name]])
        elif array.dtype.kind in "iu" and types[name] in ONNX_INTEGERS:  # processors' int32
            array = array.astype(ONNX_INTEGERS[types[name]])
        out[name] = array
    return out
