"""lowering.transposed: tile-by-tile transposition, in memory and streamed to a file."""

from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from lowering.transposed import TransposedTensor, transpose, transposed_slabs


@pytest.mark.parametrize("shape", [(1, 1), (3, 700), (700, 3), (257, 513), (512, 256), (0, 5)])
def test_transpose_matches_numpy(shape):
    source = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert np.array_equal(transpose(source), source.T)
    slabs = list(transposed_slabs(source, rows_per_slab=100))
    assert all(s.flags.c_contiguous for s in slabs)
    joined = np.concatenate(slabs) if slabs else np.empty((0, shape[0]), np.float32)
    assert np.array_equal(joined.reshape(shape[::-1]), source.T)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16, np.float64])
def test_transposed_tensor_writes_the_bytes_of_the_transpose(dtype):
    source = np.random.default_rng(1).standard_normal((300, 70)).astype(dtype)
    tensor = TransposedTensor(ir.tensor(source), name="w.T")
    assert list(tensor.shape) == [70, 300]
    buffer = io.BytesIO()
    tensor.tofile(buffer)
    expected = ir.tensor(np.ascontiguousarray(source.T)).tobytes()
    assert buffer.getvalue() == expected
    assert tensor.tobytes() == expected
    assert np.array_equal(tensor.numpy(), source.T)


def test_a_graph_cache_recipe_keeps_the_source_and_its_streamed_write():
    # the recipe drops a lazy tensor's cached value (``_tensor``), never the source of a transpose
    from mobius.graph_cache import recipe
    from mobius.output.package import writes_alongside

    source = np.random.default_rng(2).standard_normal((40, 9)).astype(np.float32)
    tensor = TransposedTensor(ir.tensor(source), name="w.T")
    again = recipe.loads(recipe.dumps(tensor, roots=()), checkpoint=None)
    assert writes_alongside(tensor) and writes_alongside(again)
    buffer = io.BytesIO()
    again.tofile(buffer)
    assert buffer.getvalue() == ir.tensor(np.ascontiguousarray(source.T)).tobytes()
