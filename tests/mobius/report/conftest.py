"""A model no lowering covers: a registered custom config + causal LM whose MLP calls digamma.

``aten.digamma`` has no lowering in ``lowering/`` and no entry in torch's decomposition table
(``test_explain_blocked`` checks both), so it survives to the report as a blocked op.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

import mobius.sources.config

MODEL_TYPE = "mobius_explain_digamma"
BLOCKED_OP = torch.ops.aten.digamma.default


class DigammaConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, vocab_size=64, hidden_size=16, num_hidden_layers=3, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        super().__init__(**kwargs)


class DigammaMLP(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden, hidden)
        self.down = torch.nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.digamma(self.up(x).abs() + 1.0))


class DigammaLayer(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.mlp = DigammaMLP(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class DigammaForCausalLM(PreTrainedModel):
    config_class = DigammaConfig
    base_model_prefix = "digamma"

    def __init__(self, config: DigammaConfig) -> None:
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = torch.nn.ModuleList(
            DigammaLayer(config.hidden_size) for _ in range(config.num_hidden_layers)
        )
        self.lm_head = torch.nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return CausalLMOutput(logits=self.lm_head(x))


AutoConfig.register(MODEL_TYPE, DigammaConfig)
AutoModelForCausalLM.register(DigammaConfig, DigammaForCausalLM)


@pytest.fixture
def registered():
    """The custom model type is registered with transformers at import; mobius must know it."""
    assert MODEL_TYPE in mobius.sources.config.known_model_types()


@pytest.fixture(scope="session")
def digamma_checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("digamma")
    torch.manual_seed(0)
    model = DigammaForCausalLM(DigammaConfig(architectures=["DigammaForCausalLM"]))
    model.save_pretrained(directory)
    return directory
