"""What a saved graph leaves out (``mobius.output.disk_form``): nothing a reader cannot rebuild.

The saved file itself is checked in ``test_package.py`` (on the build it saves anyway)."""

from __future__ import annotations

from mobius.output.disk_form import CLASSES, SCOPES, scopes_repeat_namespace


def test_scopes_repeat_namespace():
    props = {
        "namespace": "model.layers.0.self_attn: LlamaAttention/rotary: ApplyRotary",
        SCOPES: "['model.layers.0.self_attn', 'rotary']",
        CLASSES: "['LlamaAttention', 'ApplyRotary']",
    }
    assert scopes_repeat_namespace(props)
    assert not scopes_repeat_namespace({**props, CLASSES: "['LlamaAttention', 'Other']"})
    assert not scopes_repeat_namespace({**props, "namespace": "model.layers.0.self_attn: X"})
    assert not scopes_repeat_namespace({**props, SCOPES: "not a list"})
    assert not scopes_repeat_namespace({SCOPES: props[SCOPES], CLASSES: props[CLASSES]})
