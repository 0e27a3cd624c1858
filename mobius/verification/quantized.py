"""Weight-only quantized packages (``--precision int4|int8``): the PyTorch model is given the
weights the package stores, rounded to nearest in the same blocks (``mobius.quant.blocks``), and
the package is held to the float tolerance against that; the comparison with the original float
weights is reported beside it, as what quantization costs (docs/design/verify.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from mobius.quant.blocks import Packed, Scheme, quantize
from mobius.verification.pairs import Comparison

FLOAT_NOTE = "the checkpoint's float weights: what quantization costs (not judged)"


def scheme_of(manifest: dict) -> Scheme | None:
    """The package's quantization scheme (None: not weight-only quantized by mobius)."""
    q = manifest.get("quantization")
    if not q:
        return None
    return Scheme(q["bits"], q["block_size"], q["symmetric"], q.get("accuracy_level", 0))


def dequantize(packed: Packed, scheme: Scheme, shape: tuple[int, int]) -> np.ndarray:
    """The ``[N, K]`` float32 weight ``MatMulNBits`` computes with (``mobius.quant.blocks``)."""
    n, k = shape
    kb, bs = scheme.blocks(k), scheme.block_size
    b = packed.b.reshape(n, kb, -1)
    if scheme.bits == 4:
        q = np.stack([b & 0x0F, b >> 4], axis=-1).reshape(n, kb, bs)
    else:
        q = b
    if packed.zero_points is None:
        zero = np.full((n, kb), 1 << (scheme.bits - 1), dtype=np.float32)
    elif scheme.bits == 4:
        z = packed.zero_points.reshape(n, -1)
        zero = np.stack([z & 0x0F, z >> 4], axis=-1).reshape(n, -1)[:, :kb].astype(np.float32)
    else:
        zero = packed.zero_points.reshape(n, kb).astype(np.float32)
    scales = packed.scales.astype(np.float32).reshape(n, kb)
    weight = (q.astype(np.float32) - zero[..., None]) * scales[..., None]
    return weight.reshape(n, kb * bs)[:, :k]


def round_trip(weight: torch.Tensor, scheme: Scheme, dtype: np.dtype) -> torch.Tensor:
    """``weight`` ``[N, K]`` quantized in ``dtype`` (the package's: its scales' precision) and
    dequantized back, in the weight's own dtype."""
    values = weight.detach().float().numpy().astype(dtype)
    restored = dequantize(quantize(values, scheme), scheme, tuple(values.shape))
    return torch.from_numpy(restored).to(weight.dtype)


def apply(model: torch.nn.Module, manifest: dict) -> str | None:
    """Give ``model`` the weights the package computes with, in place; None when done, else why
    not (quantized experts, a weight not found by its name)."""
    q, scheme = manifest["quantization"], scheme_of(manifest)
    if q.get("quantized_experts"):
        return "its MoE experts are quantized, which verify does not round-trip yet"
    dtype = np.float16 if manifest.get("dtype") == "f16" else np.float32
    params = dict(model.named_parameters(remove_duplicate=False))
    shared = set(q.get("embedding_shared_with_lm_head", []))
    # packed projections (--ep cpu's q/k/v) are listed joined by commas: their rows are
    # quantized as each weight's own (blocks run along K, one scale per row and block)
    names = [
        name
        for entry in [*q["quantized_weights"], *q.get("embedding_quantized", [])]
        for name in entry.split(",")
    ]
    missing = [n for n in names if n not in params]
    if missing:
        return f"no parameter {missing[0]} in the PyTorch model"
    output = model.get_output_embeddings()
    with torch.no_grad():
        for name in names:
            param = params[name]
            module = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            transposed = type(module).__name__ == "Conv1D"  # GPT-2 stores [in, out]
            value = param.T if transposed else param
            restored = round_trip(value, scheme, dtype)
            restored = restored.T if transposed else restored
            if module is output and _tied(model, param) and not shared:
                # the lookup keeps the float embedding: only the head reads quantized rows
                output.weight = torch.nn.Parameter(restored, requires_grad=False)
            else:
                param.copy_(restored)
    return None


def _tied(model: torch.nn.Module, param: torch.nn.Parameter) -> bool:
    inputs = model.get_input_embeddings()
    return inputs is not None and inputs.weight is param


def compare(
    model: torch.nn.Module, manifest: dict, run: Callable[[], Comparison]
) -> list[Comparison]:
    """``run()`` with the float weights (reported, not judged), then with the package's own
    quantized weights (judged); only the first where the weights cannot be given."""
    floats = run()
    if scheme_of(manifest) is None:
        return [floats]
    why = apply(model, manifest)
    if why is not None:
        note = f"the checkpoint's float weights (the quantized ones not reproduced: {why})"
        return [dataclasses.replace(floats, note=note, float_weights=True)]
    informative = dataclasses.replace(floats, judged=False, note=FLOAT_NOTE, float_weights=True)
    same = dataclasses.replace(run(), note="the package's quantized weights, dequantized")
    return [informative, same]
