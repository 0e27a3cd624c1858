"""UniDiffuser's caption decoder (``mobius/diffusers/tuple_outputs.py``, argument rules, and
``overrides/unidiffuser.py``): its ``(CausalLMOutput, hidden)`` tuple as the outputs ``logits``
and ``hidden``, GPT-2's KV cache no output. Converted with the CLI and matching PyTorch at atol
1e-4 at the two size sets."""

from __future__ import annotations

import json

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


def test_caption_decoder_gives_logits_and_encoded_prefix(tmp_path):
    model, out = convert("UniDiffuserTextDecoder", tmp_path)
    graph = json.loads((out / "mobius.json").read_text())["graphs"]["model.onnx"]
    assert graph == {"inputs": ["input_ids", "prefix_embeds"], "outputs": ["logits", "hidden"]}
    diffs = max_diffs(model, out)
    assert len(diffs) == 4  # two outputs at two size sets
    assert max(diffs.values()) < ATOL, diffs
