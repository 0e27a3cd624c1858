"""Translate (or summarise) with an encoder–decoder package, using only onnxruntime and numpy
(and the ``tokenizers`` library when the package has a ``tokenizer.json``).

    mobius build --model Helsinki-NLP/opus-mt-en-de --output /tmp/opus-onnx
    python examples/translation.py /tmp/opus-onnx --text "The house is small."

Without a checkpoint at hand, ``--tiny`` makes a tiny random-weight T5 (no network), converts it
and runs it on token ids; its output is noise, but the loop is the real one:

    python examples/translation.py /tmp/tiny-t5-onnx --tiny --ids 5 17 42 9
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mobius.runtime.seq2seq import Seq2SeqRunner  # noqa: E402 (onnxruntime + numpy only)


def make_tiny(output: Path) -> None:
    """A tiny random T5 checkpoint beside ``output``, converted into ``output``."""
    import mobius
    from mobius.testing.seq2seq import tiny_seq2seq

    checkpoint = output.with_name(output.name + "-hf")
    tiny_seq2seq("t5", checkpoint)
    mobius.build(checkpoint).save(output, overwrite=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", type=Path, help="a directory mobius build wrote")
    parser.add_argument("--text", help="text to translate (needs tokenizer.json in the package)")
    parser.add_argument("--ids", type=int, nargs="*", help="encoder token ids instead of text")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--tiny", action="store_true", help="make and convert a tiny random T5")
    args = parser.parse_args()
    if args.tiny:
        make_tiny(args.package)
    runner = Seq2SeqRunner(args.package)
    tokenizer = None
    if args.text is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(args.package / "tokenizer.json"))
        ids = tokenizer.encode(args.text).ids
    else:
        ids = args.ids or [5, 17, 42, 9]
    input_ids = np.array([ids], dtype=np.int64)
    tokens = runner.generate(
        input_ids=input_ids,
        attention_mask=np.ones_like(input_ids),
        max_new_tokens=args.max_new_tokens,
        eos_token_id=runner.manifest.get("eos_token_id"),
    )
    new = tokens[0, 1:].tolist()
    print(tokenizer.decode(new, skip_special_tokens=True) if tokenizer else new)


if __name__ == "__main__":
    main()
