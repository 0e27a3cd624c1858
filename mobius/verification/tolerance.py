"""How close a package's outputs must be to PyTorch's: by the precision of the two computations.

The coarser of the package's precision and the PyTorch model's decides (a bf16 checkpoint run in
bf16 is no reference to 1e-4). docs/design/verify.md gives the reasons for each number.
"""

from __future__ import annotations

from dataclasses import dataclass

# float32: the breadth sweeps' tolerance (docs/coverage.md), for outputs of order one; an output
# that reaches larger magnitudes (real logits of 20-40) is held to the same relative error
F32 = 1e-4
# half precision, relative to the output's largest magnitude: PyTorch's own f16 logits differ from
# float64 by 0.24-0.49 % of the largest logit, and an ONNX half graph may be twice as far
# (tests/mobius/ep/test_rewrite.py, HALF_ERROR_FACTOR; docs/design/ep-graphs.md "Half
# precision"): 1 %.
# bfloat16 keeps 3 fewer mantissa bits than float16: 8 times that.
F16 = 1e-2
BF16 = 8e-2
# weight-only quantization changes the function itself; the graph is judged by the top-1 choice
# of each row of scores and, for other outputs, the cosine similarity of each row
TOP1 = {"int8": 0.95, "int4": 0.6}
COSINE = {"int8": 0.99, "int4": 0.9}
# the same quantized weights, computed with int8 activations (accuracy_level 4) by the package
INT8_ACTIVATIONS = 0.9
# graphs whose float32 outputs the sweeps hold to a looser bound (diffusers_coverage.py: VAE
# decoders at 1e-3 relative, their images reach magnitudes where float32 rounding adds up)
LOOSER = {"vae_decoder": 10.0}

ORDER = ("f32", "f16", "bf16")  # finer to coarser
TORCH_NAMES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f32"}


@dataclass(frozen=True)
class Tolerance:
    """The rule an output is judged by.

    ``kind`` is ``"scaled"`` (``max |diff| <= bound * max(1, max |PyTorch|)``) or ``"top-1"``
    (quantized: argmax agreement of score rows at least ``top1``, cosine similarity of other
    rows at least ``cosine``). ``tokens``: whether greedy tokens must equal PyTorch's."""

    kind: str
    bound: float = 0.0
    top1: float = 0.0
    cosine: float = 0.0
    tokens: bool = False
    precision: str = "f32"

    def describe(self) -> str:
        if self.kind == "top-1":
            return (
                f"{self.precision}: top-1 agreement >= {self.top1:.0%} of score rows, cosine "
                f">= {self.cosine} for other outputs"
            )
        return f"{self.precision}: max |diff| <= {self.bound:g} x max(1, max |PyTorch|)"

    def scaled(self, graph: str) -> Tolerance:
        """This rule for ``graph`` (a few graphs are held to a looser float bound)."""
        factor = next((f for name, f in LOOSER.items() if graph.startswith(name)), 1.0)
        if self.kind != "scaled" or factor == 1.0:
            return self
        return Tolerance(
            self.kind, self.bound * factor, tokens=self.tokens, precision=self.precision
        )

    def to_json(self) -> dict:
        out = {"kind": self.kind, "precision": self.precision, "tokens_must_match": self.tokens}
        if self.kind == "top-1":
            return {**out, "min_top1_agreement": self.top1, "min_cosine": self.cosine}
        return {**out, "bound": self.bound}


def coarser(a: str, b: str) -> str:
    """The less precise of two float dtypes (``f32``, ``f16``, ``bf16``)."""
    return max(a, b, key=ORDER.index)


def tolerance_for(
    dtype: str,
    reference_dtype: str,
    quantized: str | None = None,
    *,
    float_weights: bool = False,
    int8_activations: bool = False,
) -> Tolerance:
    """The rule for a package of ``dtype`` (``f32``, ``f16``, ``bf16``) against PyTorch run in
    ``reference_dtype``. A package weight-only quantized to ``quantized`` (``int4``, ``int8``)
    compared with the checkpoint's ``float_weights`` is judged by top-1 agreement; compared with
    its own quantized weights, by the float rule, unless its kernels take int8 activations
    (``int8_activations``: MatMulNBits ``accuracy_level`` 4), which round more than float does."""
    if quantized in TOP1 and float_weights:
        return Tolerance(
            "top-1", top1=TOP1[quantized], cosine=COSINE[quantized], precision=quantized
        )
    if int8_activations:
        return Tolerance(
            "top-1", top1=INT8_ACTIVATIONS, cosine=COSINE["int8"], precision="int8 activations"
        )
    precision = coarser(dtype, reference_dtype)
    bound = {"f32": F32, "f16": F16, "bf16": BF16}[precision]
    return Tolerance("scaled", bound, tokens=precision == "f32", precision=precision)
