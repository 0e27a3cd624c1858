"""QwenImage and NucleusMoE: the rotary tables cut by rows gathered at positions computed from
the (symbolic) grid and prompt length, not by ``int()`` and slices of complex constants.

``QwenEmbedRope`` and ``NucleusMoEEmbedRope`` hold complex64 tables of 4096 positions per axis
(``pos_freqs``, and ``neg_freqs`` for the negative positions of a centred grid) and cut them by
Python ints: the frame, height and width of ``img_shapes`` (symbolic sizes here: the latent
grid, ``mobius.diffusers.latent_grid``) and ``int(max_txt_seq_len)``, which fixes the prompt
length in a trace. A complex constant is no ONNX initializer either. Here both tables are one
float32 table of (real, imaginary) pairs, row ``p + 4096`` holding position ``p`` in
[-4096, 4096), and every row the model would slice is gathered by its position: the frame
index, the height and width positions (centred under ``scale_rope``: ``-(n - n // 2)`` to
``n // 2 - 1``), and the text positions from ``max(height, width)`` (halved under
``scale_rope``) on. The values are the model's rows, so the result is equal to the last bit.
"""

from __future__ import annotations

import types
from typing import Any

import torch

ROWS = 4096  # positions per sign in the models' tables


def _axis(table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return table.to(positions.device).index_select(0, positions + ROWS)


def _positions(n: Any, centred: bool, device: torch.device | None) -> torch.Tensor:
    """The positions of ``n`` rows or columns: ``0 .. n - 1``, or centred on 0."""
    index = torch.arange(n, device=device)
    return index - (n - n // 2) if centred else index


def rotary_by_gathers(module: torch.nn.Module, running_max: bool = True) -> None:
    """Install the gathered tables; ``running_max``: the text starts past the largest grid of
    ``img_shapes`` (QwenImage), else past the last one's (NucleusMoE)."""
    pairs = torch.cat([torch.view_as_real(module.neg_freqs), torch.view_as_real(module.pos_freqs)])
    if pairs.shape[0] != 2 * ROWS:
        return  # another table than the one this override reads: leave the model's own
    halves = [d // 2 for d in module.axes_dim]
    tables = pairs.split(halves, dim=1)  # per axis: [2 * ROWS, d / 2, 2]

    def forward(
        self: Any, video_fhw: Any, device: torch.device | None = None, max_txt_seq_len: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if max_txt_seq_len is None:
            raise ValueError("`max_txt_seq_len` must be provided.")
        fhw = video_fhw[0] if isinstance(video_fhw, list) else video_fhw
        shapes = fhw if isinstance(fhw, list) else [fhw]
        video, longest = [], 0
        for index, (frame, height, width) in enumerate(shapes):
            axes = (
                _axis(tables[0], torch.arange(frame, device=device) + index),
                _axis(tables[1], _positions(height, self.scale_rope, device)),
                _axis(tables[2], _positions(width, self.scale_rope, device)),
            )
            grid = [
                a.view(*(n if i == axis else 1 for i, n in enumerate((frame, height, width))),
                       *a.shape[1:]).expand(frame, height, width, *a.shape[1:])
                for axis, a in enumerate(axes)
            ]  # fmt: skip
            video.append(torch.cat(grid, dim=3).reshape(frame * height * width, -1, 2))
            sizes = (height // 2, width // 2) if self.scale_rope else (height, width)
            longest = torch.sym_max(longest if running_max else 0, torch.sym_max(*sizes))
        text = torch.arange(max_txt_seq_len, device=device) + longest
        text_pairs = pairs.to(device).index_select(0, text + ROWS)
        return (
            torch.view_as_complex(torch.cat(video).contiguous()),
            torch.view_as_complex(text_pairs.contiguous()),
        )

    module.forward = types.MethodType(forward, module)


def nucleus_rotary_by_gathers(module: torch.nn.Module) -> None:
    rotary_by_gathers(module, running_max=False)


def _text_length(
    encoder_hidden_states: torch.Tensor, mask: torch.Tensor | None
) -> tuple[Any, None, torch.Tensor | None]:
    """``compute_text_seq_len_from_mask`` less the per-row lengths its callers drop (their
    fallback, ``torch.as_tensor`` of the prompt length, is a constant that fixes the length)."""
    return encoder_hidden_states.shape[1], None, None if mask is None else mask.to(torch.bool)


def text_length_from_shape(module: torch.nn.Module) -> None:
    # The transformers and the ControlNet call their module's compute_text_seq_len_from_mask
    # (NucleusMoE: _compute_...) and keep its first and last results only; the forward runs with
    # that name bound to _text_length, which gives those two alike.
    import sys

    namespace = sys.modules[type(module).__module__]
    names = [n for n in ("compute_text_seq_len_from_mask", "_compute_text_seq_len_from_mask")
             if hasattr(namespace, n)]  # fmt: skip
    forward = module.forward

    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        originals = {n: getattr(namespace, n) for n in names}
        for name in names:
            setattr(namespace, name, _text_length)
        try:
            return forward(*args, **kwargs)
        finally:
            for name, original in originals.items():
                setattr(namespace, name, original)

    module.forward = types.MethodType(wrapped, module)


def expert_choice_by_batched_matmul(module: torch.nn.Module) -> None:
    # NucleusMoELayer routes by expert choice: each expert takes its top `capacity` tokens,
    # capacity = max(1, ceil(capacity_factor * tokens / experts)) by Python float arithmetic
    # (math.ceil of a symbolic size), and runs the experts over their equal shares by
    # `num_tokens_per_expert.tolist()` and a loop. Here the capacity is the same ceiling in
    # integers, the capacity factor as the exact fraction its float is (symbolic in the token
    # count), and the experts one batched matmul over the [experts, share, width] tokens.
    from fractions import Fraction

    import torch.nn.functional as F

    factor = Fraction(module.capacity_factor)

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        hidden_states_unmodulated: torch.Tensor,
        timestep: torch.Tensor | None = None,
    ) -> torch.Tensor:
        bs, slen, dim = hidden_states.shape
        if timestep is not None:
            timestep_expanded = timestep.unsqueeze(1).expand(-1, slen, -1)
            router_input = torch.cat([timestep_expanded, hidden_states_unmodulated], dim=-1)
        else:
            router_input = hidden_states_unmodulated
        logits = self.gate(router_input)
        if self.use_sigmoid:
            scores = torch.sigmoid(logits.float()).to(logits.dtype)
        else:
            scores = F.softmax(logits.float(), dim=-1).to(logits.dtype)
        affinity = scores.transpose(1, 2)  # (B, E, S)
        share = factor.denominator * self.num_experts
        capacity = torch.sym_max(1, (factor.numerator * slen + share - 1) // share)
        top = torch.topk(affinity, k=capacity, dim=-1)
        gating = affinity.gather(dim=-1, index=top.indices)  # (B, E, C)
        offsets = torch.arange(bs, device=hidden_states.device).view(bs, 1, 1) * slen
        tokens = (offsets + top.indices).transpose(0, 1).reshape(-1)  # expert by expert
        gating_flat = gating.transpose(0, 1).reshape(-1)
        sums = torch.zeros(bs * slen, device=hidden_states.device, dtype=gating_flat.dtype)
        sums = sums.scatter_add(0, tokens, gating_flat)
        gating_flat = gating_flat / (sums[tokens] + 1e-12) * self.route_scale
        routed = hidden_states.reshape(bs * slen, dim)[tokens].view(self.num_experts, -1, dim)
        gate, up = torch.bmm(routed, self.experts.gate_up_proj).chunk(2, dim=-1)
        routed = torch.bmm(F.silu(gate) * up, self.experts.down_proj).reshape(-1, dim)
        routed = (routed.type_as(hidden_states).float() * gating_flat.unsqueeze(-1)).to(
            hidden_states.dtype
        )
        out = self.shared_expert(hidden_states).reshape(bs * slen, dim)
        out = out.scatter_add(0, tokens.reshape(-1, 1).expand(-1, dim), routed)
        return out.reshape(bs, slen, dim)

    module.forward = types.MethodType(forward, module)


def _signed_rows(table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``table[positions]`` with Python's negative indexing (rows counted from the end)."""
    rows = torch.where(positions < 0, positions + table.shape[0], positions)
    return table.to(positions.device).index_select(0, rows)


def text_then_target_layout(module: torch.nn.Module) -> None:
    # QwenImage21Transformer2DModel lays its joint sequence out from img_mask's values (image slots
    # repeated 4-fold, latents written at the mask's True positions, rotary positions from
    # .tolist(), attention segments from image_ids.tolist()): shapes from input values, which a
    # graph traced once cannot follow. Text-to-image has one layout, the prompt's tokens then the
    # target's, which is what the graph's derived img_mask says (latent_grid.py): here that layout
    # is built from the sizes (each result as diffusers builds it for that mask), the prefix's one
    # text segment and the target's full attention as one mask (the "decode" branch of its
    # processor, which takes a mask), and no KV cache. Condition images are not covered.
    from diffusers.models.modeling_outputs import Transformer2DModelOutput

    tables = [torch.view_as_real(t) for t in module.pos_embed.freqs]  # complex: as real pairs

    def rotary(text: Any, height: Any, width: Any, device: torch.device) -> torch.Tensor:
        index = torch.arange(text + height * width, device=device)
        patch = (index - text).clamp(min=0)
        image = index >= text
        frame = torch.where(image, text, index)
        row = torch.where(image, patch // width - (height - height // 2), index)
        col = torch.where(image, patch % width - (width - width // 2), index)
        pairs = [_signed_rows(t, p) for t, p in zip(tables, (frame, row, col), strict=True)]
        return torch.view_as_complex(torch.cat(pairs, dim=1).contiguous())

    def forward(
        self: Any,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        timestep: torch.Tensor,
        img_shapes: list,
        img_mask: torch.Tensor,
        encoder_hidden_states_mask: torch.Tensor | None = None,
        attention_kwargs: dict | None = None,
        kv_cache: Any = None,
        kv_cache_mode: str | None = None,
        return_dict: bool = True,
    ) -> Any:
        if kv_cache is not None or len(img_shapes[0]) != 1:
            raise NotImplementedError("QwenImage21 in a graph: text-to-image, no KV cache")
        _, height, width = img_shapes[0][-1]
        batch_size, text = encoder_hidden_states.shape[0], encoder_hidden_states.shape[1]
        device = hidden_states.device
        joint = torch.cat([self.txt_in(encoder_hidden_states), self.img_in(hidden_states)], dim=1)
        rotary_emb = rotary(text, height, width, device)
        index = torch.arange(text + height * width, device=device)
        target = index >= text
        timestep = timestep.to(hidden_states.dtype)
        modulation_mask = None
        if self.config.causal_condition:
            timestep = torch.cat([timestep, timestep.new_zeros(1)], dim=0)
            modulation_mask = target
        temb = self.time_text_embed(timestep, hidden_states)
        modulation = self.modulation(temb)
        # the prefix attends causally within itself, the target to every key
        allowed = (index[None, :] <= index[:, None]) | target[:, None]
        mask = allowed[None, None]
        if encoder_hidden_states_mask is not None:
            image_keys = torch.ones(batch_size, height * width, dtype=torch.bool, device=device)
            valid = torch.cat([encoder_hidden_states_mask.bool(), image_keys], dim=1)
            mask = mask & valid[:, None, None, :]
        for block in self.transformer_blocks:
            joint = block(hidden_states=joint, modulation=modulation, rotary_emb=rotary_emb,
                          attention_mask=mask, target_token_mask=modulation_mask)  # fmt: skip
        joint = self.norm_out(joint, temb, modulation_mask)
        output = self.proj_out(joint)
        return Transformer2DModelOutput(sample=output) if return_dict else (output,)

    module.forward = types.MethodType(forward, module)
