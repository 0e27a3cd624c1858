"""A head's outputs by the contract's names (mobius/tasks/head.py ``contract_output``)."""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_outputs import (
    BaseModelOutputWithNoAttention,
    BaseModelOutputWithPooling,
    SequenceClassifierOutput,
)

from mobius.tasks.head import contract_output


def test_the_only_tensor_of_a_one_output_head_is_its_contract_output():
    scores = torch.ones(2, 3)  # PP-LCNet's classifier returns its scores as last_hidden_state
    out = BaseModelOutputWithNoAttention(last_hidden_state=scores)
    assert contract_output(out, "logits", 1) is scores
    named = SequenceClassifierOutput(logits=scores)
    assert contract_output(named, "logits", 1) is scores


def test_other_outputs_must_carry_the_contract_name():
    two = BaseModelOutputWithPooling(last_hidden_state=torch.ones(2), pooler_output=torch.ones(2))
    with pytest.raises(KeyError):
        contract_output(two, "logits", 1)  # two tensors: which one is not guessed
    one = BaseModelOutputWithNoAttention(last_hidden_state=torch.ones(2))
    with pytest.raises(KeyError):
        contract_output(one, "logits", 2)  # a head with several outputs names each
