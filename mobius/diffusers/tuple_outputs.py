"""Forwards that return a tuple of an output dataclass and loose tensors, or of tensors alone,
as one dict of named tensors for the generic contract (``generic.ForwardTask``).

UniDiffuser's caption decoder returns ``(CausalLMOutput, hidden)`` when ``prefix_hidden_dim`` is
set (the dataclass alone otherwise): the dataclass's tensor fields keep their names (``logits``;
``loss`` is None without labels, and the KV cache is no tensor: GPT-2's cache is off for the
trace, ``overrides/unidiffuser.py``), and each loose tensor takes the name this table gives it
(``hidden``: the encoded prefix, what its pipeline diffuses as the text latent).
"""

from __future__ import annotations

from typing import Any

import torch

# class name -> the name of each member of the tuple its forward returns (None: a dataclass,
# whose tensor fields are outputs under their own names)
MEMBER_NAMES: dict[str, tuple[str | None, ...]] = {
    "UniDiffuserTextDecoder": (None, "hidden"),
    # the packed prompt, lyrics and references, as ACE-Step's transformer takes them
    "AceStepConditionEncoder": ("encoder_hidden_states", "encoder_attention_mask"),
}


def named_outputs(cls: type, output: Any) -> Any:
    """``output`` as a dict of named tensors where ``cls`` returns a tuple of a dataclass and
    tensors; any other output as it is."""
    names = MEMBER_NAMES.get(cls.__name__)
    if names is None:
        return output
    members = output if isinstance(output, tuple) and not hasattr(output, "keys") else (output,)
    flat: dict[str, torch.Tensor] = {}
    for name, member in zip(names, members, strict=False):  # the dataclass alone: one member
        if hasattr(member, "keys"):
            flat |= {k: v for k, v in member.items() if isinstance(v, torch.Tensor)}
        elif name is not None:
            flat[name] = member
    return flat
