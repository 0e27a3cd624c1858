"""ACE-Step's condition encoder: the packed references unpacked per batch row by comparisons,
their counts as data-dependent sizes, and their rows checked against the batch in the graph."""

from __future__ import annotations

import torch


def references_by_comparison(module: torch.nn.Module) -> None:
    # AceStepTimbreEncoder.unpack_timbre_embeddings spreads the packed references (one pooled
    # embedding each, tagged with its batch row by refer_audio_order_mask) over [rows, most
    # references of a row]: the row count and the largest count are `.item()`s of the tags' max
    # and bincount, and each reference's slot comes from a stable argsort. bincount's length
    # follows the values, which torch.export cannot trace. Here the counts are comparisons of the
    # tags against every row, and a reference's slot in its row is the number of earlier
    # references with the same tag (what the stable sort gives); the two `.item()`s stay
    # data-dependent sizes of the graph (unbacked symbols), so the output's length follows the
    # tags as PyTorch's does. The one-hot matrix and its product are the model's own: each
    # slot takes one reference times 1, exactly.
    module.unpack_timbre_embeddings = unpack_by_comparison


def rows_checked_against_batch(module: torch.nn.Module) -> None:
    # AceStepConditionEncoder concatenates the lyrics' states with the unpacked references, so
    # the references' rows (the tags' max + 1) must be the batch: PyTorch's cat raises where they
    # differ (and bincount where a tag is negative). torch.export takes that equality from the
    # cat and the graph then reads the batch alone. Here the tags pass a gather that is out of
    # range unless the two agree and no tag is negative (adding 0), so the graph stops where
    # PyTorch does instead of dropping references or leaving rows empty.
    forward = module.forward

    def checked(
        text_hidden_states: torch.Tensor,
        text_attention_mask: torch.Tensor,
        lyric_hidden_states: torch.Tensor,
        lyric_attention_mask: torch.Tensor,
        refer_audio_acoustic_hidden_states_packed: torch.Tensor,
        refer_audio_order_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tags = refer_audio_order_mask
        differs = (tags.max() + 1 - lyric_hidden_states.shape[0]).abs() + (tags.min() < 0).long()
        tags = tags + tags.new_zeros(1)[differs.view(1)]
        return forward(
            text_hidden_states=text_hidden_states,
            text_attention_mask=text_attention_mask,
            lyric_hidden_states=lyric_hidden_states,
            lyric_attention_mask=lyric_attention_mask,
            refer_audio_acoustic_hidden_states_packed=refer_audio_acoustic_hidden_states_packed,
            refer_audio_order_mask=tags,
        )

    module.forward = checked


def unpack_by_comparison(
    timbre_embs_packed: torch.Tensor, refer_audio_order_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``unpack_timbre_embeddings`` without bincount or argsort: ``([rows, slots, dim], mask
    [rows, slots])`` for references ``[n, dim]`` tagged with their rows ``[n]``."""
    n, dim = timbre_embs_packed.shape
    device, dtype = timbre_embs_packed.device, timbre_embs_packed.dtype
    tags = refer_audio_order_mask
    rows = tags.max().item() + 1
    torch._check(rows >= 1)
    in_row = tags[None, :] == torch.arange(rows, device=device)[:, None]  # [rows, n]
    slots = in_row.sum(dim=1).max().item()
    torch._check(slots >= 1)
    same = tags[:, None] == tags[None, :]  # [n, n]
    earlier = torch.ones(n, n, dtype=torch.bool, device=device).tril(diagonal=-1)
    slot = (same & earlier).sum(dim=1)
    index = tags * slots + slot
    one_hot = (index[:, None] == torch.arange(rows * slots, device=device)[None, :]).to(dtype)
    unpacked = (one_hot.t() @ timbre_embs_packed).reshape(rows, slots, dim)
    mask = (one_hot.sum(dim=0) > 0).long().reshape(rows, slots)
    return unpacked, mask
