"""Compare a converted model, run by onnxruntime, with the HF model in eager PyTorch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mobius.runtime.causal_lm import (  # the tests import both from here too
    MODEL_FILE,
    OnnxCausalLM,
    session,
)
from mobius.verification.pairs import Pair, for_session, for_torch, to_numpy


def decoder_inputs(
    vocab_size: int,
    batch: int = 2,
    length: int = 7,
    pad: int = 3,
    seed: int = 1,
    pad_token_id: int | None = None,
) -> dict[str, torch.Tensor]:
    """Token ids with the first row left-padded by ``pad`` positions, and the contract's position
    ids (real tokens counted from 0). With ``pad_token_id``, the padded positions hold it and no
    real token does, as a tokenizer pads (RoBERTa-style models find padding by that id)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, :pad] = 0
    if pad_token_id is not None and 0 <= pad_token_id < vocab_size:
        ids[ids == pad_token_id] = (pad_token_id + 1) % vocab_size
        ids[mask == 0] = pad_token_id
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}


def text_decoder_inputs(config, length: int = 7) -> dict[str, torch.Tensor]:
    """``decoder_inputs`` for ``config``'s text model: its vocab, padded with its pad token."""
    pad_token_id = getattr(config, "pad_token_id", None)
    return decoder_inputs(
        config.vocab_size,
        length=length,
        pad_token_id=pad_token_id if isinstance(pad_token_id, int) else None,
    )


def _logits(out) -> torch.Tensor:
    return (out.logits if hasattr(out, "logits") else out[0]).float()


def hf_derives_positions(model: torch.nn.Module, feeds: dict[str, torch.Tensor]) -> bool:
    """Whether ``model``, called without ``position_ids``, numbers each row's real tokens from
    that row's first one, as RoBERTa (from ``input_ids``) and OPT (from ``attention_mask``) do.

    Checked on ``feeds``' first left-padded row: its logits without ``position_ids`` equal those
    of the same tokens without the padding. Such models are called that way by their users, so
    parity compares with that call; the others (GPT-2 counts pads as positions) are called with
    the mask-derived ``position_ids``, as ``generate`` passes them.
    """
    import inspect

    if "position_ids" not in inspect.signature(model.forward).parameters:
        return False
    mask = feeds["attention_mask"]
    padded = [row for row in range(len(mask)) if not bool(mask[row].all())]
    if not padded:
        return True
    row, ids = padded[0], feeds["input_ids"]
    start = int((mask[row] == 0).sum())
    if bool(mask[row, start:].eq(0).any()):  # not left padding
        return False
    try:
        with torch.no_grad():
            with_pads = _logits(
                model(input_ids=ids[row : row + 1], attention_mask=mask[row : row + 1])
            )
            alone = _logits(
                model(
                    input_ids=ids[row : row + 1, start:], attention_mask=mask[row : row + 1, start:]
                )
            )
    except Exception:  # noqa: BLE001 - a model that cannot run without position_ids
        return False
    return bool((with_pads[0, start:] - alone[0]).abs().max() < 1e-3)


def hf_reference_feeds(model: torch.nn.Module, feeds: dict[str, torch.Tensor]) -> dict:
    """The feeds to call the HF model with as its users do: without ``position_ids`` where it
    derives them itself (``hf_derives_positions``), else with the contract's."""
    feeds = hf_feeds(model, feeds)
    if "position_ids" in feeds and hf_derives_positions(model, feeds):
        feeds = {k: v for k, v in feeds.items() if k != "position_ids"}
    return feeds


CODE_POINTS = 0x110000


def encoder_inputs(
    vocab_size: int,
    names: list[str],
    batch: int = 2,
    length: int = 7,
    seed: int = 1,
    pad_token_id: int | None = None,
) -> dict[str, torch.Tensor]:
    """Token ids with right padding in the first row (how encoders are batched), plus token types.
    With ``pad_token_id``, the padded positions hold it and no real token does (RoBERTa-style
    encoders number positions from the non-pad tokens)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[0, -2:] = 0
    if pad_token_id is not None and 0 <= pad_token_id < vocab_size:
        ids[ids == pad_token_id] = 3 if pad_token_id != 3 else 4
        ids[mask == 0] = pad_token_id
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in names:
        types = torch.zeros_like(ids)
        types[:, length // 2 :] = 1
        feeds["token_type_ids"] = types
    return feeds


def max_abs_diff(model: torch.nn.Module, directory: Path, config, length: int = 7) -> float:
    """Largest |onnxruntime - torch| over the positions that carry real tokens (or all, for vision)."""
    return max(p.max_abs() for p in uncached_pairs(model, directory, config, length=length))


def uncached_pairs(
    model: torch.nn.Module,
    directory: Path,
    config,
    length: int = 7,
    feeds: dict[str, torch.Tensor] | None = None,
    lm: OnnxCausalLM | None = None,
) -> list[Pair]:
    """One call of a graph without a cache: the contract's outputs (``contract_pairs``), or, for
    a decoder that takes ``position_ids``, its first output (logits) on ``feeds`` (a left-padded
    batch of ``length`` tokens by default), at the positions that carry real tokens."""
    lm = lm or OnnxCausalLM(directory)
    sess = lm.session
    names = [i.name for i in sess.get_inputs()]
    if "position_ids" not in names:
        return contract_pairs(model, directory, config, feeds=feeds, sess=sess)
    feeds = feeds if feeds is not None else text_decoder_inputs(config, length=length)
    keep = feeds["attention_mask"].bool().numpy()
    with torch.no_grad():
        out = model(**hf_reference_feeds(model, feeds))
    expected = out[0] if isinstance(out, tuple) else getattr(out, "logits", None)
    if expected is None:
        expected = out.last_hidden_state
    expected = to_numpy(expected)
    feeds_np = for_session(sess, feeds)
    feeds_np.update(lm.empty_cache(len(feeds["input_ids"])))
    actual = sess.run(None, feeds_np)[0]
    output = sess.get_outputs()[0].name
    return [Pair(MODEL_FILE, output, "", actual, expected, keep, scores=output == "logits")]


def contract_feeds(sess, config, batch: int = 2, seed: int = 1) -> dict[str, torch.Tensor]:
    """Inputs for every graph input of a single-call task (CONTRACTS.md), by name: token ids
    right-padded in some rows (with a choices axis where the graph has one), random pixels at the
    config's image size, or raw samples with the first row padded (zeros, as a feature extractor
    pads). A dual encoder gets one text more than images."""
    from mobius.tasks.head import image_size

    gen = torch.Generator().manual_seed(seed)
    shapes = {i.name: i.shape for i in sess.get_inputs()}
    feeds: dict[str, torch.Tensor] = {}
    if "input_ids" in shapes:
        text_batch = batch + 1 if "pixel_values" in shapes else batch
        choices = 3 if len(shapes["input_ids"]) == 3 else 1
        # a model with no vocabulary reads Unicode code points (CANINE hashes them)
        vocab = getattr(config.get_text_config(), "vocab_size", None) or CODE_POINTS
        pad = getattr(config.get_text_config(), "pad_token_id", None)
        pad = pad if isinstance(pad, int) and 0 <= pad < vocab else None
        text = encoder_inputs(
            vocab, list(shapes), batch=text_batch * choices, seed=seed, pad_token_id=pad
        )
        text["attention_mask"][1::2, -3:] = 0  # more rows padded, by other amounts
        if pad is not None:  # padded positions hold the pad token (RoBERTa numbers the others)
            text["input_ids"][text["attention_mask"] == 0] = pad
        if getattr(config, "is_encoder_decoder", False):
            _end_with_eos(text, config.get_text_config(), vocab)
        if "token_type_ids" in text and getattr(config.get_text_config(), "type_vocab_size", 2) < 2:
            text["token_type_ids"].zero_()  # a model with one token type (gte)
        for name, value in text.items():
            if name in shapes:
                feeds[name] = value.reshape(text_batch, choices, -1) if choices > 1 else value
    if "pixel_values" in shapes:
        feeds["pixel_values"] = torch.randn(batch, *image_size(config), generator=gen)
    if "input_features" in shapes or len(shapes.get("input_values", ())) == 3:
        feeds.update(_spectrogram_feeds(shapes, batch, gen))
    elif "input_values" in shapes:
        samples, pad = 2000, 400
        values = torch.randn(batch, samples, generator=gen)
        mask = torch.ones(batch, samples, dtype=torch.long)
        mask[0, -pad:] = 0
        feeds["input_values"] = values * mask
        if "attention_mask" in shapes:
            feeds["attention_mask"] = mask
    return feeds


def _spectrogram_feeds(shapes: dict, batch: int, gen: torch.Generator) -> dict:
    """Random features at the graph's static sizes (50 frames where the count is dynamic); with
    a frame mask, the first row's last 10 frames are padding (zeros, as extractors pad)."""
    name = "input_features" if "input_features" in shapes else "input_values"
    dims = shapes[name]
    shape = [batch] + [d if isinstance(d, int) else 50 for d in dims[1:]]
    values = torch.randn(*shape, generator=gen)
    feeds = {name: values}
    if "attention_mask" in shapes:
        mask = torch.ones(batch, shape[1], dtype=torch.long)
        mask[0, -10:] = 0
        feeds[name] = values * mask[..., None]
        feeds["attention_mask"] = mask
    return feeds


def _end_with_eos(text: dict[str, torch.Tensor], config, vocab: int) -> None:
    """Each row's last real token is EOS and no other is, as an encoder-decoder's tokenizer
    ends a text (BART's and T5's sequence classifiers read the hidden state at the EOS)."""
    eos = getattr(config, "eos_token_id", None)
    if not isinstance(eos, int) or not 0 <= eos < vocab:
        return
    ids, mask = text["input_ids"], text["attention_mask"]
    ids[(ids == eos) & (mask == 1)] = (eos + 1) % vocab
    last = mask.sum(-1) - 1
    ids[torch.arange(len(ids)), last] = eos


def contract_diffs(model: torch.nn.Module, directory: Path, config) -> dict[str, float]:
    """Max |onnxruntime - torch| per contract output of a single-call task (batch 2, padded).

    Outputs with one row per token (``last_hidden_state``, token logits) are compared on the
    real tokens only; the rest (pooled logits, audio frames, embeddings) everywhere.
    """
    return {p.output: p.max_abs() for p in contract_pairs(model, directory, config)}


# outputs whose last axis scores classes, choices or the vocabulary (argmax agreement applies)
SCORES = ("logits", "logits_per_image", "logits_per_text")


def contract_pairs(
    model: torch.nn.Module,
    directory: Path,
    config,
    feeds: dict[str, torch.Tensor] | None = None,
    sess=None,
) -> list[Pair]:
    """Every contract output of a single-call task on ``feeds`` (``contract_feeds``' by
    default): outputs with one row per token are kept to the real tokens."""
    from mobius.tasks.head import contract_output

    sess = sess or session(directory)
    feeds = feeds if feeds is not None else contract_feeds(sess, config)
    with torch.no_grad():
        out = model(**for_torch(model, feeds), return_dict=True)
    names = [o.name for o in sess.get_outputs()]
    actual = dict(zip(names, sess.run(None, for_session(sess, feeds)), strict=True))
    mask = feeds.get("attention_mask") if "input_ids" in feeds else None
    pairs = []
    for name in names:
        expected = to_numpy(contract_output(out, name, len(names)))
        keep = None
        if mask is not None and expected.shape[: mask.dim()] == tuple(mask.shape):
            keep = mask.bool().numpy()
        pairs.append(Pair(MODEL_FILE, name, "", actual[name], expected, keep, name in SCORES))
    return pairs


def hf_greedy(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, new_tokens: int
) -> np.ndarray:
    """HF ``generate`` greedy tokens, never stopping early (so EOS is an ordinary token here too)."""
    from transformers import GenerationConfig

    saved = model.generation_config
    model.generation_config = GenerationConfig(
        do_sample=False,
        max_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
    )
    try:
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask)
    finally:
        model.generation_config = saved
    return out[:, ids.shape[1] :].numpy()


def hf_feeds(model: torch.nn.Module, feeds: dict) -> dict:
    """The feeds that ``model.forward`` accepts (all of them where it takes ``**kwargs``)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return {k: v for k, v in feeds.items() if k in params or takes_kwargs}


def causal_lm_parity(
    model: torch.nn.Module, directory: Path, config, prefill: int = 6, length: int = 9
) -> dict:
    """Max |onnxruntime - torch| of a converted causal LM (batch 2, left padding).

    With a KV cache: a prefill of ``prefill`` tokens, then one decode step of the rest on the
    returned cache, each against the full forward, called as the model's users call it
    (``hf_reference_feeds``: without ``position_ids`` where it derives them itself). Without one: the logits of all ``length``. Returns
    ``cache``, ``prefill_diff``, ``decode_diff`` (with a cache) and ``max_diff``.
    """
    lm = OnnxCausalLM(directory)
    pairs = causal_lm_pairs(model, directory, config, prefill=prefill, length=length, lm=lm)
    if not lm.has_cache:
        diff = max(p.max_abs() for p in pairs)
        return {"cache": False, "prefill_diff": diff, "max_diff": diff}
    prefill_diff, decode_diff = (p.max_abs() for p in pairs)
    return {
        "cache": True,
        "prefill_diff": prefill_diff,
        "decode_diff": decode_diff,
        "max_diff": max(prefill_diff, decode_diff),
    }


def causal_lm_pairs(
    model: torch.nn.Module,
    directory: Path,
    config,
    prefill: int = 6,
    length: int = 9,
    feeds: dict[str, torch.Tensor] | None = None,
    lm: OnnxCausalLM | None = None,
) -> list[Pair]:
    """The logits of a converted causal LM against the HF model's (``causal_lm_parity``) on
    ``feeds`` (a left-padded batch of ``length`` random tokens by default): with a cache, the
    prefill of the first ``prefill`` tokens and the cached step of the rest; without one
    (``uncached_pairs``), one call on them all."""
    text = config.get_text_config()
    lm = lm or OnnxCausalLM(directory)
    if not lm.has_cache:
        return uncached_pairs(model, directory, text, length=length, feeds=feeds, lm=lm)
    feeds = feeds if feeds is not None else text_decoder_inputs(text, length=length)
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    with torch.no_grad():
        out = model(**hf_reference_feeds(model, feeds))
    expected = to_numpy(out.logits if hasattr(out, "logits") else out[0])
    keep = mask.astype(bool)
    first, cache = lm.run(
        ids[:, :prefill], mask[:, :prefill], pos[:, :prefill], lm.empty_cache(len(ids))
    )
    step, cache = lm.run(ids[:, prefill:], mask, pos[:, prefill:], cache)
    return [
        Pair(
            MODEL_FILE, "logits", "prefill", first, expected[:, :prefill], keep[:, :prefill], True
        ),
        Pair(
            MODEL_FILE,
            "logits",
            "cached step",
            step,
            expected[:, prefill:],
            keep[:, prefill:],
            True,
        ),
    ]


def assert_left_padded_batch_matches_hf(directory, model, new: int) -> None:
    """Batch of two, the first row left-padded by 3: a 6-token prefill, a cached step of ``new``
    tokens and 8 greedy tokens, against HF."""
    lm = OnnxCausalLM(directory)
    feeds = decoder_inputs(model.config.vocab_size, length=6 + new)
    ids, mask, pos = (feeds[k].numpy() for k in ("input_ids", "attention_mask", "position_ids"))
    with torch.no_grad():
        expected = model(**feeds).logits.numpy()
    keep = mask.astype(bool)
    prefill, cache = lm.run(ids[:, :6], mask[:, :6], pos[:, :6], lm.empty_cache(2))
    assert np.abs(prefill - expected[:, :6])[keep[:, :6]].max() < 1e-4
    step, _ = lm.run(ids[:, 6:], mask, pos[:, 6:], cache)
    assert np.abs(step - expected[:, 6:]).max() < 1e-4
    prompt = {k: v[:, :6] for k, v in feeds.items()}
    tokens = lm.generate(prompt["input_ids"].numpy(), prompt["attention_mask"].numpy(), 8)
    np.testing.assert_array_equal(
        tokens, hf_greedy(model, prompt["input_ids"], prompt["attention_mask"], 8)
    )
