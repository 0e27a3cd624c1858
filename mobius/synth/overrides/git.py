"""GIT: the decoder graph's forward, on embeddings whose image rows (if any) come first."""

from __future__ import annotations

from typing import Any

import torch


def split_forward(module: torch.nn.Module) -> None:
    # GitModel.forward adds positions and its LayerNorm inside the embedding step, takes the image
    # as pixels, and once its cache is non-empty widens the padding mask by the image's patch
    # count, assuming the first call put an image there. The converted decoder takes
    # inputs_embeds (the embedding graph's image rows, then the raw word embeddings; or the word
    # embeddings alone on a text-only call) and position_ids for the text rows only
    # (tasks/vlm_prepend.py): the last len(position_ids) rows get the position embedding and the
    # LayerNorm, the rows before them are image rows (attending to each other both ways), and the
    # 2-D mask is widened in front by however many rows the cache and the call hold beyond it
    # (none in the text-generation contract, whose mask spans them: the old widening by the patch
    # count shifted every padding column there, 0.67 off in the sweep).
    original = module.forward

    def forward(
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: Any = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        from transformers import DynamicCache
        from transformers.masking_utils import create_causal_mask
        from transformers.modeling_outputs import BaseModelOutputWithPast

        cache = kwargs.pop("past_key_values", cache)
        if pixel_values is not None:  # HF's own path (the conversion passes no pixels)
            return original(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                pixel_values=pixel_values,
                inputs_embeds=inputs_embeds,
                cache=cache,
                use_cache=use_cache,
                **kwargs,
            )
        embeddings = module.embeddings
        embeds = (
            inputs_embeds if inputs_embeds is not None else embeddings.word_embeddings(input_ids)
        )
        batch, length = embeds.shape[:2]
        if use_cache and cache is None:
            cache = DynamicCache(config=module.config)
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + length, device=embeds.device).expand(batch, -1)
        text = position_ids.shape[-1]
        image = length - text
        words = embeds[:, image:] + embeddings.position_embeddings(position_ids)
        words = embeddings.dropout(embeddings.LayerNorm(words))
        hidden = torch.cat([embeds[:, :image], words], 1)
        if attention_mask is not None and attention_mask.dim() == 2:
            wider = past + length - attention_mask.shape[1]
            ones = attention_mask.new_ones((batch, wider))
            attention_mask = torch.cat([ones, attention_mask], 1)
        groups = torch.cat(
            [
                torch.zeros((batch, image), dtype=torch.long, device=embeds.device),
                torch.full((batch, text), -1, dtype=torch.long, device=embeds.device),
            ],
            1,
        )
        causal = create_causal_mask(
            config=module.config.get_text_config(),
            inputs_embeds=hidden,
            attention_mask=attention_mask,
            cache=cache,
            position_ids=None,
            block_sequence_ids=groups,
        )
        out = module.encoder(hidden, attention_mask=causal, cache=cache, use_cache=use_cache)
        return BaseModelOutputWithPast(last_hidden_state=out.last_hidden_state, cache=out.cache)

    module.forward = forward
