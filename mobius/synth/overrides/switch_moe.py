"""Switch Transformers and NLLB-MoE: experts kept as a dict of dense MLPs, run on every token.

Their ``*Experts`` modules loop over the experts some token was sent to
(``expert_hit = ....nonzero()``) and gather each expert's tokens with ``torch.where``: a loop of
data-dependent length over data-dependent row counts, which torch.export cannot trace. Here each
expert runs on every token and its output is kept where HF's loop would have added it, in HF's
order (experts ascending, then routing slots), so the sums round as HF's do.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MethodType

import torch

# the expert module's routing input -> HF's ``expert_mask`` [experts, slots, tokens]
MaskOf = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


def _switch_mask(module: torch.nn.Module, selected: torch.Tensor) -> torch.Tensor:
    return selected.permute(2, 1, 0)  # [tokens, 1, experts] one-hot after capacity


def _nllb_mask(module: torch.nn.Module, router_mask: torch.Tensor) -> torch.Tensor:
    # HF one-hots the router's [tokens, experts] 0/1 mask: "expert e" there is the mask's value
    return torch.nn.functional.one_hot(router_mask, num_classes=module.num_experts).permute(2, 1, 0)


def _every_expert(mask_of: MaskOf, scale: Callable[[torch.nn.Module], float]) -> Callable:
    def install(module: torch.nn.Module) -> None:
        def forward(
            self: torch.nn.Module,
            hidden_states: torch.Tensor,
            routing: torch.Tensor,
            weights: torch.Tensor,
        ) -> torch.Tensor:
            expert_mask = mask_of(self, routing)  # [experts, slots, tokens]
            out = torch.zeros_like(hidden_states)
            for e in range(self.num_experts):
                expert_out = self[f"expert_{e}"](hidden_states)
                for slot in range(expert_mask.shape[1]):
                    picked = expert_mask[e, slot].ne(0).unsqueeze(-1)
                    added = expert_out * weights[:, slot, None]
                    factor = scale(self)
                    if factor != 1.0:
                        added = added * factor
                    out = out + torch.where(picked, added.to(out.dtype), 0.0)
            return out

        module.forward = MethodType(forward, module)

    return install


def _no_scale(module: torch.nn.Module) -> float:
    return 1.0


def _token_dropout_scale(module: torch.nn.Module) -> float:
    """NLLB-MoE in eval scales each expert output by ``1 - moe_token_dropout``."""
    return 1.0 - module.moe_token_dropout if module.moe_token_dropout > 0 else 1.0


switch_every_expert = _every_expert(_switch_mask, _no_scale)
nllb_every_expert = _every_expert(_nllb_mask, _token_dropout_scale)


def router_reads_padding(module: torch.nn.Module) -> None:
    """``NllbMoeSparseMLP``: the encoder's router keeps padding tokens from every expert, reading
    them from the layer's 4D attention mask. The captured attention builds no such mask (the
    layers get None), so in an encoder graph with a padding input the module marks itself as
    declined and the graph is traced again with transformers' attention and its mask."""
    from mobius.tasks.seq2seq_phase import current_phase

    own = module.forward

    def forward(
        self: torch.nn.Module, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        current = current_phase()
        if (
            padding_mask is None
            and current is not None
            and current.graph == "encoder"
            and current.padded_lengths is not None
            and not self.router.router_ignore_padding_tokens
        ):
            self._mobius_declined = (
                "its router reads the padding from the attention mask, which the captured "
                "attention does not build"
            )
        return own(hidden_states, padding_mask)

    module.forward = MethodType(forward, module)
