"""Causal LMs (text-generation, ``model.onnx`` with a KV cache): a left-padded batch of two, its
prefill and one cached step against the full forward, and greedy tokens against HF ``generate``."""

from __future__ import annotations

from mobius.runtime.causal_lm import MODEL_FILE, OnnxCausalLM
from mobius.testing.parity import causal_lm_pairs, hf_greedy, text_decoder_inputs
from mobius.verification import inputs, quantized, reference
from mobius.verification.pairs import Comparison, Tokens
from mobius.verification.request import Request, Result
from mobius.verification.session import opened

RANDOM_LENGTH, RANDOM_PREFILL = 9, 6  # tokens, of which the first six are the prefill


def run(request: Request) -> Result:
    checkpoint, model, dtype = reference.load_for(request)
    lm = opened(lambda: OnnxCausalLM(request.package), request.package / MODEL_FILE)
    text = model.config.get_text_config()
    if request.given.prompt is not None:
        tok = inputs.tokenizer(request.package, checkpoint.directory)
        ids = inputs.prompt_ids(tok, request.given.prompt)
        pad = next((t for t in (tok.pad_token_id, tok.eos_token_id) if t is not None), 0)
        feeds = inputs.left_padded(ids, pad)
        prefill = len(ids) - 1
        short = int(feeds["attention_mask"][1].sum())
        described = f"{request.given.describe()} and its first {short} tokens, left-padded"
    else:
        feeds = text_decoder_inputs(text, length=RANDOM_LENGTH)
        # GroupQueryAttention (--ep cuda, dml, webgpu, cpu with int4) takes several new tokens
        # over a cache only in a batch of one: a one-token step
        prefill = RANDOM_LENGTH - 1 if _grouped_query(request) else RANDOM_PREFILL
        described = f"random token ids, {RANDOM_LENGTH} a row, the first left-padded by 3"
    width = feeds["input_ids"].shape[1]
    described += f"; prefill {prefill}"
    described += f" + cached step of {width - prefill}" if lm.has_cache else " (no KV cache)"
    if lm.has_cache and request.new_tokens > 0:
        described += f"; {request.new_tokens} greedy tokens"

    def compare() -> Comparison:
        pairs = causal_lm_pairs(
            model, request.package, model.config, prefill=prefill, feeds=feeds, lm=lm
        )
        if not lm.has_cache or request.new_tokens <= 0:
            return Comparison(pairs)
        ids, mask = feeds["input_ids"], feeds["attention_mask"]
        ours = lm.generate(ids.numpy(), mask.numpy(), request.new_tokens)
        theirs = hf_greedy(model, ids, mask, request.new_tokens)
        return Comparison(pairs, Tokens(MODEL_FILE, ours, theirs))

    comparisons = quantized.compare(model, request.manifest, compare)
    return Result(comparisons, reference.dtype_name(dtype), described)


def _grouped_query(request: Request) -> bool:
    """The graph computes attention with com.microsoft GroupQueryAttention."""
    import onnx

    graph = onnx.load(str(request.package / MODEL_FILE), load_external_data=False).graph
    return any(node.op_type == "GroupQueryAttention" for node in graph.node)
