"""GGUF quantized blocks read as MatMulNBits blocks (``mobius.gguf.blocks``), against the ``gguf``
package's dequantizer."""

from __future__ import annotations

import gguf  # the testing extra installs it; missing is a failure, not a skip
import numpy as np
import pytest

from mobius.gguf.blocks import LAYOUTS, decode_rows, dequantize
from mobius.testing.gguf_files import BLOCKS, random_blocks


@pytest.mark.parametrize("type_name", sorted(LAYOUTS))
def test_blocks_hold_ggml_values(type_name):
    """MatMulNBits' ``(q - zero_point) * scale`` over the decoded blocks is ggml's value: bit for
    bit for integer zero points, to float32 rounding for float ones."""
    layout = LAYOUTS[type_name]
    raw = random_blocks(type_name, 8, 512, np.random.default_rng(0))
    raw[0, : BLOCKS[type_name][0]] = 0  # an all-zero block: zero scales (and offsets)
    expected = gguf.dequantize(raw, gguf.GGMLQuantizationType[type_name])
    blocks = decode_rows(raw, layout)
    assert blocks.codes.max() < 2**layout.bits
    assert blocks.codes.shape == (8, 512 // layout.block_size, layout.block_size)
    actual = dequantize(blocks)
    if layout.exact:
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=0, atol=4e-7 * np.abs(expected).max())
