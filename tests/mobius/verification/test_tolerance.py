"""The tolerance verify holds an output to, by the precisions of the package and the reference."""

from __future__ import annotations

from mobius.verification.tolerance import tolerance_for


def test_tolerance_by_precision():
    assert tolerance_for("f32", "f32").bound == 1e-4
    assert tolerance_for("f16", "f32").precision == "f16"
    assert tolerance_for("f32", "bf16").precision == "bf16"  # the coarser of the two
    assert tolerance_for("f32", "f32", "int4").kind == "scaled"  # against its own weights
    assert tolerance_for("f32", "f32", "int4", float_weights=True).kind == "top-1"
    assert tolerance_for("f32", "f32", int8_activations=True).kind == "top-1"
