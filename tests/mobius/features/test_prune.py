"""``prune-prefill-prefix``: logits for the last position only, equal to PyTorch's last row."""

from __future__ import annotations

import numpy as np

from mobius.runtime.causal_lm import OnnxCausalLM


def test_last_position_logits_match_pytorch(converted):
    directory = converted.with_features("prune-prefill-prefix")
    lm = OnnxCausalLM(directory)
    ids, mask, positions = converted.batch()  # batch 2, the second row left-padded
    logits, cache = lm.run(ids, mask, positions, lm.empty_cache(2))
    vocab = converted.hf.config.vocab_size
    assert logits.shape == (2, 1, vocab)
    # a decode step after the pruned prefill: one more row, again the last position's
    token = logits[:, -1].argmax(-1)[:, None]
    mask2 = np.concatenate([mask, np.ones_like(token)], axis=1)
    step, _ = lm.run(token, mask2, positions[:, -1:] + 1, cache)
    # causal: one forward over both gives the prefill's last row (-2) and the step's (-1)
    full = converted.hf_logits(
        np.concatenate([ids, token], 1), mask2, np.clip(mask2.cumsum(-1) - 1, 0, None)
    )
    np.testing.assert_allclose(logits[:, 0], full[:, -2], atol=1e-4, rtol=0)
    np.testing.assert_allclose(step[:, 0], full[:, -1], atol=1e-4, rtol=0)
    assert lm.session.get_outputs()[0].shape == ["batch", 1, vocab]
