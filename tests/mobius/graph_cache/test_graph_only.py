"""``ModelPackage.apply_weights`` on a package built with ``weights=False``: each checkpoint
applied gives, byte for byte, the package ``mobius.build`` writes for it with weights and the
same options, without tracing again (torch.export is not called), also for a checkpoint whose
tensors are stored in another dtype than the first one applied; a checkpoint of another config
is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mobius
from mobius.errors import ConfigError
from tests.mobius.graph_cache.conftest import assert_same_package


def _applied_equals_cold(
    make, tmp_path: Path, forbid_trace, also=None, **options
) -> mobius.ModelPackage:
    """Build ``a`` graph-only, apply ``b`` then ``a`` then ``also(b)`` (if given) to it, with no
    trace, and compare ``b``'s and ``also``'s with cold builds of them with weights; returns the
    graph-only package."""
    make(tmp_path / "a", 0)
    make(tmp_path / "b", 1)
    checked = [tmp_path / "b", *([also(tmp_path / "b")] if also else [])]
    cold = {
        path: mobius.build(path, **options).save(path.with_name(f"{path.name}-cold"))
        for path in checked
    }
    graph = mobius.build(tmp_path / "a", weights=False, **options)
    forbid_trace()
    applied = graph.apply_weights(tmp_path / "b").save(tmp_path / "applied-b")
    again = graph.apply_weights(tmp_path / "a").save(tmp_path / "applied-a")  # recipes rebound
    data = [p.name for p in applied.iterdir() if p.name.endswith(".data")]
    assert data and all((applied / n).read_bytes() != (again / n).read_bytes() for n in data)
    assert_same_package(cold[checked[0]], applied)
    for path in checked[1:]:
        made = graph.apply_weights(path).save(tmp_path / f"applied-{path.name}")
        assert_same_package(cold[path], made)
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


def _stored_as_bf16(source: Path, target: Path) -> Path:
    """A copy of the checkpoint ``source`` (same config) whose tensors are stored as bf16."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(source, target)
    for file in target.glob("*.safetensors"):
        tensors = {k: v.to(torch.bfloat16) for k, v in load_file(file).items()}
        save_file(tensors, file, metadata={"format": "pt"})
    return target


def test_causal_lm_f16(tmp_path, trace_forbidder):
    from mobius.testing.tiny import make_checkpoint

    graph = _applied_equals_cold(
        lambda path, seed: make_checkpoint("llama", path, seed=seed),
        tmp_path,
        trace_forbidder,
        # tensors stored as bf16, not f32: the recipes do not fit, the graphs are emitted for them
        also=lambda b: _stored_as_bf16(b, b.with_name("b-bf16")),
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
