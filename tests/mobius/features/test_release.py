"""``--release``: debug and provenance metadata gone, ``mobius.*`` kept, the graph unchanged."""

from __future__ import annotations

import numpy as np
import onnx

from mobius.features.release import release
from mobius.runtime.causal_lm import OnnxCausalLM
from mobius.testing.features import load_package


def _structure(model: onnx.ModelProto) -> list[tuple]:
    return [
        (n.op_type, n.domain, n.name, tuple(n.input), tuple(n.output), str(n.attribute))
        for n in model.graph.node
    ]


def test_release_strips_metadata_and_keeps_the_graph(converted, tmp_path):
    package = load_package(converted.base)
    package.model.doc_string = "built from /home/someone/checkpoints"
    target = release(package).save(tmp_path / "release")
    before = onnx.load(converted.base / "model.onnx", load_external_data=False)
    after = onnx.load(target / "model.onnx", load_external_data=False)
    assert any(n.metadata_props for n in before.graph.node)  # what there was to strip
    assert not any(n.metadata_props or n.doc_string for n in after.graph.node)
    assert not after.doc_string and not after.graph.doc_string
    kept = {p.key for p in after.metadata_props}
    assert kept == {p.key for p in before.metadata_props if p.key.startswith("mobius.")} | {
        "mobius.release"
    }
    assert after.producer_name == before.producer_name
    assert _structure(after) == _structure(before)
    assert [i.name for i in after.graph.initializer] == [i.name for i in before.graph.initializer]
    # it loads and computes the same
    ids, mask, positions = converted.batch()
    original, stripped = OnnxCausalLM(converted.base), OnnxCausalLM(target)
    expected, _ = original.run(ids, mask, positions, original.empty_cache(2))
    got, _ = stripped.run(ids, mask, positions, stripped.empty_cache(2))
    np.testing.assert_array_equal(got, expected)
