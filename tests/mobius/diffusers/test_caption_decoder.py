"""UniDiffuser's caption decoder (``mobius/diffusers/caption_decoder.py``, ``tuple_outputs.py``,
its argument rules and ``overrides/unidiffuser.py``): ``text_decoder/``, its forward, whose
``(CausalLMOutput, hidden)`` tuple gives ``logits`` and ``hidden`` (GPT-2's KV cache no output),
and ``caption_decoder/``, one beam-search step. Converted with the CLI; both graphs match
PyTorch at atol 1e-4 at the two size sets, and the pipeline's beam search run on the step graph
gives PyTorch's captions token for token."""

from __future__ import annotations

import json
from types import SimpleNamespace

import onnxruntime as ort
import pytest
import torch

from tests.mobius.diffusers.parity import ATOL, convert, max_diffs


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert("UniDiffuserTextDecoder", tmp_path_factory.mktemp("unidiffuser"))


def test_both_graphs_match_pytorch(converted):
    model, out = converted
    graphs = {
        name: json.loads((out / name / "mobius.json").read_text())["graphs"]["model.onnx"]
        for name in ("text_decoder", "caption_decoder")
    }
    assert graphs == {
        "text_decoder": {"inputs": ["input_ids", "prefix_embeds"], "outputs": ["logits", "hidden"]},
        "caption_decoder": {"inputs": ["hidden", "input_ids"], "outputs": ["logits"]},
    }
    diffs = max_diffs(model, out)
    assert len(diffs) == 6  # three outputs at two size sets
    assert max(diffs.values()) < ATOL, diffs


class _StepGraph(torch.nn.Module):
    """``model.transformer`` for ``generate_beam``, its logits from the caption step graph: the
    prefix rows of ``inputs_embeds`` stand for ``hidden``, the rest are rows of the token table
    (their ids found by equality)."""

    def __init__(self, model: torch.nn.Module, session: ort.InferenceSession, hidden) -> None:
        super().__init__()
        self.transformer = model.transformer.transformer  # generate_beam embeds tokens with it
        self.session, self.hidden, self.prefix = session, hidden, model.prefix_length
        self.steps = 0

    def forward(self, inputs_embeds: torch.Tensor) -> SimpleNamespace:
        tokens = inputs_embeds[:, self.prefix :]
        table = self.transformer.wte.weight
        ids = (tokens[:, :, None, :] == table).all(-1).int().argmax(-1)
        assert torch.equal(self.transformer.wte(ids), tokens)
        hidden = self.hidden.expand(inputs_embeds.shape[0], -1, -1)
        (logits,) = self.session.run(None, {"hidden": hidden.numpy(), "input_ids": ids.numpy()})
        self.steps += 1
        return SimpleNamespace(logits=torch.from_numpy(logits))


def test_beam_search_on_the_step_graph_gives_pytorchs_captions(converted):
    """``generate_captions``' beam search, row by row (diffusers stacks rows' captions, which
    fails when they stop at different lengths)."""
    model, out = converted
    session = ort.InferenceSession(str(out / "caption_decoder" / "model.onnx"))
    features = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for row in range(features.shape[0]):
            prefix = model.decode_prefix(features[row : row + 1])
            expected = model.generate_beam(input_embeds=prefix, eos_token_id=3)
            graph = _StepGraph(model, session, features[row : row + 1])
            original, model.transformer = model.transformer, graph
            try:
                tokens, lengths = model.generate_beam(input_embeds=prefix, eos_token_id=3)
            finally:
                model.transformer = original
            assert graph.steps > 1
            assert torch.equal(tokens, expected[0]) and torch.equal(lengths, expected[1])
