"""UniDiffuser's caption decoder as its pipeline runs it: a graph for each beam-search step.

``UniDiffuserTextDecoder.forward`` takes the prompt's CLIP states and encodes them
(``encode_prefix``) before GPT-2; its pipeline captions from the diffused text latent, which is
already encoded: ``generate_captions`` decodes it (``decode_prefix``) and ``generate_beam`` runs
GPT-2 on ``inputs_embeds``, the decoded prefix then the token embeddings of the beam's caption so
far, whole at every step (no cache). So the class is two graphs:

- ``text_decoder``: its ``forward`` (the generic contract): ``input_ids``, ``prefix_embeds`` ->
  ``logits``, ``hidden`` (``hidden`` is ``encode``'s output, the text latent the pipeline
  diffuses);
- ``caption_decoder``: one step of ``generate_beam``: ``hidden`` ``[batch, prefix_length,
  prefix_hidden_dim]`` (the diffused latent; ``n_embd`` wide without the prefix MLP) and
  ``input_ids`` int64 ``[batch, sequence_length]`` (the caption so far; none at the first
  step) -> ``logits`` ``[batch, prefix_length + sequence_length, vocab_size]``.
"""

from __future__ import annotations

from typing import Any

import torch

from mobius.diffusers.tasks import DiffusersTask
from mobius.tasks.base import BATCH, SEQUENCE, TensorSpec

DECODER = "UniDiffuserTextDecoder"


def _step_inputs(cfg: Any) -> list[TensorSpec]:
    width = cfg.get("prefix_hidden_dim") or cfg.get("n_embd", 768)
    return [
        TensorSpec("hidden", None, (BATCH, cfg.get("prefix_length"), width)),
        TensorSpec("input_ids", torch.int64, (BATCH, SEQUENCE)),
    ]


def _step(model: torch.nn.Module, x: dict[str, torch.Tensor]) -> tuple[torch.Tensor]:
    """``generate_beam``'s call on ``generate_captions``' decoded prefix and the caption."""
    prefix = model.decode_prefix(x["hidden"])
    tokens = model.transformer.transformer.wte(x["input_ids"])
    return (model.transformer(inputs_embeds=torch.cat((prefix, tokens), dim=1)).logits,)


def caption_tasks(name: str, cls: type) -> list[DiffusersTask] | None:
    """The forward graph and the caption step graph of UniDiffuser's caption decoder, or None
    for any other class."""
    if name != DECODER:
        return None
    from mobius.diffusers.generic import forward_task

    forward = forward_task(cls)
    forward.name = "text_decoder"  # beside caption_decoder/, not a "transformer" of the pipeline
    return [forward, DiffusersTask("caption_decoder", _step_inputs, _step, ("logits",))]
