"""Funnel: the relative positions of each pooling block kept symbolic in the sequence length."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Positions:
    """Funnel's position list, ``first + k * step`` for ``k`` in ``0..count``: the list starts
    as ``range(length)`` and each pooling keeps it an arithmetic progression (the separate CLS
    position, ``1 - 2**block``, is one step before the pooled tokens' first, 1)."""

    first: int | torch.SymInt
    step: int
    count: int | torch.SymInt  # positions after the first

    @property
    def last(self) -> int | torch.SymInt:
        return self.first + self.count * self.step


def symbolic_positions(module: torch.nn.Module) -> None:
    # FunnelAttentionStructure.get_position_embeds builds the relative positions from
    # `list(range(seq_len))`, a Python list as long as the input: torch.export fixes the sequence
    # length to the traced one. Only the lists' ends and lengths are read, and each is an
    # arithmetic progression, so (first, step, count) gives the same aranges with a symbolic length.
    config = module.config
    factorized = module.get_position_embeds

    def pooled(pos: Positions, block_index: int) -> Positions:
        if not config.separate_cls:  # pos[::2]
            return Positions(pos.first, 2 * pos.step, pos.count // 2)
        # [1 - 2**block] + (pos[1:-1] if truncate_seq else pos[1:])[::2]
        kept = torch.sym_max(pos.count - 1, 0) if config.truncate_seq else pos.count
        return Positions(1 - 2**block_index, 2 * pos.step, (kept + 1) // 2)

    def relative(pos, stride, pooled_pos=None, shift=1, device=None):
        pooled_pos = pooled_pos or pos
        max_dist = pooled_pos.first - pos.first + shift * (pooled_pos.count + 1) * stride
        min_dist = pooled_pos.first - pos.last
        return torch.arange(max_dist, min_dist - 1, -stride, dtype=torch.long, device=device)

    def get_position_embeds(seq_len, dtype, device):
        if config.attention_type == "factorized":  # aranges of seq_len already
            return factorized(seq_len, dtype, device)
        d_model = config.d_model
        freq = torch.arange(0, d_model // 2, dtype=torch.int64, device=device).to(dtype)
        inv_freq = 1 / (10000 ** (freq / (d_model // 2)))
        zero_offset = seq_len * 2
        rel_pos_id = torch.arange(-zero_offset, zero_offset, dtype=torch.int64, device=device)
        sinusoid = rel_pos_id.to(dtype)[:, None] * inv_freq[None]
        sin_embed = module.sin_dropout(torch.sin(sinusoid))
        cos_embed = module.cos_dropout(torch.cos(sinusoid))
        pos_embed = torch.cat([sin_embed, cos_embed], dim=-1)

        def gathered(rel_pos: torch.Tensor) -> torch.Tensor:
            index = (rel_pos[:, None] + zero_offset).expand(rel_pos.size(0), d_model)
            return torch.gather(pos_embed, 0, index)

        pos = Positions(0, 1, seq_len - 1)
        embeds = []
        for block_index in range(config.num_blocks):
            with_pooling = None
            pooled_pos = pos
            if block_index > 0:  # attention of the pooled queries to the unpooled keys
                pooled_pos = pooled(pos, block_index)
                stride = 2 ** (block_index - 1)
                with_pooling = gathered(relative(pos, stride, pooled_pos, shift=2, device=device))
            pos = pooled_pos
            without = gathered(relative(pos, 2**block_index, device=device))
            embeds.append([without, with_pooling])
        return embeds

    module.get_position_embeds = get_position_embeds
