"""``ModelPackage.apply_weights`` on a package built with ``weights=False``: each checkpoint
applied gives, byte for byte, the package ``mobius.build`` writes for it with weights and the
same options, without tracing again (torch.export is not called); a checkpoint of another
config is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mobius
from mobius.errors import ConfigError
from tests.mobius.graph_cache.conftest import assert_same_package


def _applied_equals_cold(make, tmp_path: Path, forbid_trace, **options) -> mobius.ModelPackage:
    """Build ``a`` graph-only, apply ``b`` then ``a`` to it (no trace), and compare ``b``'s with a
    cold build of ``b`` with weights; returns the graph-only package."""
    make(tmp_path / "a", 0)
    make(tmp_path / "b", 1)
    cold = mobius.build(tmp_path / "b", **options).save(tmp_path / "cold")
    graph = mobius.build(tmp_path / "a", weights=False, **options)
    forbid_trace()
    applied = graph.apply_weights(tmp_path / "b").save(tmp_path / "applied-b")
    again = graph.apply_weights(tmp_path / "a").save(tmp_path / "applied-a")  # recipes rebound
    assert_same_package(cold, applied)
    data = [p.name for p in applied.iterdir() if p.name.endswith(".data")]
    assert data and all((applied / n).read_bytes() != (again / n).read_bytes() for n in data)
    return graph


@pytest.fixture
def trace_forbidder(monkeypatch):
    """Call to make torch.export.export fail: what follows must not trace."""
    import torch

    def forbid() -> None:
        def traced(*args, **kwargs):
            raise AssertionError("apply_weights traced the model again")

        monkeypatch.setattr(torch.export, "export", traced)

    return forbid


def test_causal_lm_f16(tmp_path, trace_forbidder):
    from mobius.testing.tiny import make_checkpoint

    graph = _applied_equals_cold(
        lambda path, seed: make_checkpoint("llama", path, seed=seed),
        tmp_path,
        trace_forbidder,
        dtype="f16",
    )
    changed = tmp_path / "changed"
    shutil.copytree(tmp_path / "b", changed)
    config = json.loads((changed / "config.json").read_text())
    config["rms_norm_eps"] = 1e-3
    (changed / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="rms_norm_eps"):
        graph.apply_weights(changed)


def test_vlm(tmp_path, trace_forbidder):  # three graphs (a seq2seq package is built alike)
    from mobius.testing.vlm import tiny_vlm

    _applied_equals_cold(
        lambda path, seed: tiny_vlm("llava", path, seed=seed), tmp_path, trace_forbidder
    )
