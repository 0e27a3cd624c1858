"""GIT (no image placeholder) as the three graphs, written as torch functions and checked against
HF's forward and ``generate`` on the tiny config: the recipe in docs/design-notes.md ("GIT fits
the contract"); mobius's split (tasks/vlm_prepend.py, synth/overrides/git.py) follows it and
is checked by ``benchmarks/vlm_coverage.py --only git``.

    PYTHONPATH=. python benchmarks/git_split_check.py
"""

import torch
from transformers import DynamicCache, GitForCausalLM
from transformers.masking_utils import create_causal_mask

from mobius.testing.configs import tiny_config_for

torch.manual_seed(0)
cfg = tiny_config_for("git")
model = GitForCausalLM(cfg).eval()
git = model.git
P = git.encoder.layer[0].attention.self.image_patch_tokens
H = cfg.hidden_size


def vision(pixels):  # vision_encoder: [N*P, H]
    f = git.visual_projection(git.image_encoder(pixels).last_hidden_state)
    return f.reshape(-1, H)


def embed(ids, feats):  # embedding: the images' rows, then the raw token embeddings
    B = ids.shape[0]
    rows = feats.shape[0]
    n = rows // P
    length = min(rows, P)
    per_row = (torch.arange(B) * n // B) if n else torch.zeros(B, dtype=torch.long)
    idx = per_row[:, None] * P + torch.arange(length)[None]
    return torch.cat([feats[idx], git.embeddings.word_embeddings(ids)], 1)


def decode(embeds, mask, positions, cache):
    B, S, _ = embeds.shape
    T = positions.shape[1]
    img = S - T
    e = git.embeddings
    text = e.LayerNorm(embeds[:, img:] + e.position_embeddings(positions))
    hidden = torch.cat([embeds[:, :img], text], 1)
    past = cache.get_seq_length()
    full = torch.cat([torch.ones(B, past + S - mask.shape[1], dtype=mask.dtype), mask], 1)
    types = torch.cat(
        [torch.ones(B, img, dtype=torch.long), torch.zeros(B, T, dtype=torch.long)], 1
    )
    groups = torch.where(types == 1, 0, -1)
    causal = create_causal_mask(
        config=cfg.get_text_config(),
        inputs_embeds=hidden,
        attention_mask=full,
        cache=cache,
        position_ids=None,
        block_sequence_ids=groups,
    )
    out = git.encoder(hidden, attention_mask=causal, cache=cache, use_cache=True)
    return model.output(out.last_hidden_state), cache


with torch.no_grad():
    size = cfg.vision_config.image_size
    pixels = torch.randn(1, 3, size, size)
    ids = torch.randint(3, cfg.vocab_size - 3, (2, 5))
    ids[1, :2] = cfg.pad_token_id or 0
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    hf = model(
        input_ids=ids, attention_mask=mask, pixel_values=pixels, position_ids=pos, use_cache=True
    )
    feats = vision(pixels)
    cache = DynamicCache(config=cfg)
    ours, cache = decode(embed(ids, feats), mask, pos, cache)
    real = torch.cat([torch.ones(2, P, dtype=torch.bool), mask.bool()], 1)
    print(
        "P", P, "prefill", ours.shape, hf.logits.shape, (ours - hf.logits)[real].abs().max().item()
    )
    # greedy, 12 tokens
    toks, seen, m, p = [], [], mask, pos
    logits = ours
    for _ in range(12):
        seen.append(logits[:, -1])
        t = logits[:, -1].argmax(-1, keepdim=True)
        toks.append(t)
        m = torch.cat([m, torch.ones_like(t)], 1)
        p = p[:, -1:] + 1
        logits, cache = decode(embed(t, feats[:0]), m, p, cache)
    ours_t = torch.cat(toks, 1)
    from transformers import GenerationConfig

    g = GenerationConfig(
        pad_token_id=cfg.pad_token_id or 0,
        eos_token_id=None,
        max_new_tokens=12,
        do_sample=False,
        num_beams=1,
    )
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        pixel_values=pixels,
        generation_config=g,
        output_logits=True,
        return_dict_in_generate=True,
    )
    steps = (torch.stack(seen, 1) - torch.stack(out.logits, 1)).abs().max().item()
    print("12 steps' logits", steps)
    print("tokens equal", torch.equal(out.sequences[:, ids.shape[1] :], ours_t), ours_t.tolist())
