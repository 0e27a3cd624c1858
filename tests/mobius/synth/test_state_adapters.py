"""Each state adapter names a model's state as slots, installs a past and reads it back."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from mobius.synth.state_adapters import ModuleStates, StateDict, StateList, _attribute_ids


def test_a_state_list_is_split_per_layer_along_its_layer_axis():
    state = [
        torch.randn(2, 4, 3),
        torch.randn(2, 5),
    ]  # one with a layer axis (3 layers), one without
    adapter = StateList.probe(state, layers=3)
    assert [(s.layer, s.kind, s.shape) for s in adapter.slots] == [
        (0, "state_0", (2, 4)),
        (0, "state_1", (2, 5)),
        (1, "state_0", (2, 4)),
        (2, "state_0", (2, 4)),
    ]
    tensors = adapter.read(None, state)
    filled = adapter.fill(None, tensors)
    torch.testing.assert_close(filled[0], state[0])
    torch.testing.assert_close(filled[1], state[1])
    assert filled[1] is not state[1]  # the model writes in place: a copy of its own


def test_a_state_dict_cache_is_rebuilt_around_the_inputs():
    held = {0: (torch.randn(2, 3), torch.randn(2, 1)), 1: (torch.randn(2, 3), torch.randn(2, 1))}
    cache = SimpleNamespace(rnn_state=held, seqlen_offset=torch.tensor([5]), dtype=torch.float32)
    adapter = StateDict.probe(cache)
    assert [(s.layer, s.kind) for s in adapter.slots] == [
        (0, "rnn_state_0"),
        (0, "rnn_state_1"),
        (1, "rnn_state_0"),
        (1, "rnn_state_1"),
    ]
    filled = adapter.fill(None, adapter.read(None, cache))
    for layer, states in held.items():
        for mine, theirs in zip(filled.rnn_state[layer], states, strict=True):
            torch.testing.assert_close(mine, theirs)
            assert mine is not theirs
    assert filled.seqlen_offset.item() == 0 and cache.seqlen_offset.item() == 5  # not carried


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.table = torch.ones(7)  # computed once, not per sequence: not a state
        self.memory = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        past = self.memory if self.memory is not None else torch.zeros_like(x)
        self.memory = past + self.proj(x)
        return self.memory


def test_module_states_are_the_per_sequence_attributes_a_call_assigns():
    model = torch.nn.Sequential(Block(), Block())
    before = _attribute_ids(model)
    model(torch.randn(2, 4))
    adapter = ModuleStates.probe(model, before)
    assert [(s.layer, s.kind, s.attribute) for s in adapter.slots] == [
        (0, "memory", "0"),
        (1, "memory", "1"),
    ]
    past = [torch.randn(2, 4), torch.randn(2, 4)]
    assert adapter.fill(model, past) is None
    x = torch.randn(2, 4)
    out = model(x)
    first = past[0] + model[0].proj(x)
    torch.testing.assert_close(adapter.read(model, None)[0], first)
    torch.testing.assert_close(out, past[1] + model[1].proj(first))
