"""Configurations transformers itself cannot run as the contract needs are refused before
tracing with a one-line ConfigError (mobius/synth/overrides/reformer.py, xlnet.py, xlstm.py);
the tiny default configs of the same types still build."""

from __future__ import annotations

import pytest

import mobius
from mobius.errors import ConfigError
from mobius.sources.config import from_hf
from mobius.synth.meta_model import instantiate_on_meta
from mobius.tasks.detect import detect_task
from mobius.testing.configs import tiny_config_for

REFUSED = [
    ("reformer", {"axial_pos_shape": [16, 16], "max_position_embeddings": 256}, "chunks"),
    ("xlnet", {"attn_type": "uni"}, "attn_type 'uni'"),
    ("xlstm", {"qk_dim_factor": 0.5}, "qk_dim_factor=0.5"),
]


@pytest.mark.parametrize(("model_type", "overrides", "reason"), REFUSED)
def test_refused_with_its_reason(tmp_path, model_type, overrides, reason):
    tiny_config_for(model_type, **overrides).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=reason) as caught:
        mobius.build(tmp_path, weights=False)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("model_type", [t for t, _, _ in REFUSED])
def test_default_tiny_config_is_not_refused(model_type):
    arch = from_hf(tiny_config_for(model_type))
    assert instantiate_on_meta(arch, detect_task(arch), __import__("torch").float32) is not None
