"""ACE-Step's condition encoder (``overrides/ace_step_condition.py``): its output's length follows
the reference tags' values (the most references of a batch row), equal to PyTorch's at two
layouts of the references over the rows; tags naming more or fewer rows than the batch, or a
negative row, stop the graph, as PyTorch raises."""

from __future__ import annotations

import json

import onnxruntime as ort
import pytest
import torch

from mobius.diffusers.tasks import related_sizes
from mobius.verification.diffusers_feeds import PACKED_LAYOUTS, SIZE_SETS
from tests.mobius.diffusers.parity import ATOL, convert, max_diffs

LABEL = "AceStepConditionEncoder"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    return convert(LABEL, tmp_path_factory.mktemp("ace_step_condition"))


def test_feeds_tag_every_row_with_different_counts():
    """The sweep's tags: sorted rows 0..batch-1, as many as the reference axis, the rows' counts
    differing (the two size sets' largest counts differ too: two output lengths)."""
    largest = []
    for sizes in SIZE_SETS:
        sizes = related_sizes({}, sizes)
        tags = PACKED_LAYOUTS[LABEL]({}, sizes, torch.Generator())["refer_audio_order_mask"]
        counts = torch.bincount(tags).tolist()
        assert torch.equal(tags, tags.sort().values) and len(tags) == sizes["reference_count"]
        assert len(counts) == sizes["batch"] and min(counts) >= 1
        assert sizes["batch"] == 1 or len(set(counts)) > 1
        largest.append(max(counts))
    assert largest == [3, 2]


def test_references_per_row_match_pytorch(converted):
    model, out = converted
    graph = next(iter(json.loads((out / "mobius.json").read_text())["graphs"].values()))
    assert graph["outputs"] == ["encoder_hidden_states", "encoder_attention_mask"]
    diffs = max_diffs(model, out)
    assert len(diffs) == 4  # the states and their mask at both size sets
    assert max(diffs.values()) < ATOL, diffs


@pytest.mark.parametrize(
    "tags", [[0, 1, 1, 2], [0, 0], [-1, 0, 1]], ids=["more_rows", "fewer_rows", "negative"]
)
def test_tags_other_than_the_batch_stop_the_graph(converted, tags):
    model, out = converted
    cfg = model.config
    batch, text, lyrics, frames = 2, 5, 8, 9
    inputs = {
        "text_hidden_states": torch.randn(batch, text, cfg.text_hidden_dim),
        "text_attention_mask": torch.ones(batch, text, dtype=torch.bool),
        "lyric_hidden_states": torch.randn(batch, lyrics, cfg.text_hidden_dim),
        "lyric_attention_mask": torch.ones(batch, lyrics, dtype=torch.bool),
        "refer_audio_acoustic_hidden_states_packed": torch.randn(
            len(tags), frames, cfg.timbre_hidden_dim
        ),
        "refer_audio_order_mask": torch.tensor(tags),
    }
    with pytest.raises(RuntimeError), torch.no_grad():
        model(**inputs)
    session = ort.InferenceSession(str(out / "model.onnx"))
    with pytest.raises(Exception, match="out of data bounds"):
        session.run(None, {k: v.numpy() for k, v in inputs.items()})
