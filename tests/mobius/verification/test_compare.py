"""The numbers of one compared output (max abs, max rel, argmax agreement) and its verdict."""

from __future__ import annotations

import numpy as np

from mobius.verification.compare import check_output
from mobius.verification.pairs import Pair
from mobius.verification.tolerance import tolerance_for


def test_numbers_of_one_output():
    expected = np.array([[[1.0, 3.0, 2.0], [5.0, 0.0, 1.0]]], dtype=np.float32)
    actual = expected + np.array([[[0.0, 0.0, 2.5], [0.0, 0.0, 0.0]]], dtype=np.float32)
    check = check_output(
        Pair("model.onnx", "logits", "", actual, expected, scores=True), tolerance_for("f32", "f32")
    )
    assert check.max_abs == 2.5 and check.max_rel == 0.5 and check.argmax == 0.5
    assert not check.passed and check.limit == "<= 5.0e-04"
    keep = np.array([[False, True]])
    check = check_output(
        Pair("model.onnx", "logits", "", actual, expected, keep, True), tolerance_for("f32", "f32")
    )
    assert check.passed and check.max_abs == 0 and check.rows == 1
    nan = check_output(
        Pair("m.onnx", "x", "", expected * np.nan, expected), tolerance_for("f32", "f32")
    )
    assert not nan.passed
