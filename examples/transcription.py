"""Transcribe with a Whisper-style package, using only onnxruntime and numpy (and the
``tokenizers`` library to print text when the package has a ``tokenizer.json``).

    mobius build --model openai/whisper-tiny --output /tmp/whisper-onnx
    python examples/transcription.py /tmp/whisper-onnx --features mel.npy --prefix 50258 50259 50359 50363

``mel.npy`` holds log-mel features ``[1, num_mel_bins, frames]`` (what ``WhisperFeatureExtractor``
returns); ``--prefix`` is the forced decoder prefix (start of transcript, language, task, no
timestamps). Without a checkpoint at hand, ``--tiny`` makes a tiny random-weight Whisper (no
network), converts it and runs it on random features; its output is noise, the loop is the real one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mobius.runtime.seq2seq import Seq2SeqRunner  # noqa: E402 (onnxruntime + numpy only)


def make_tiny(output: Path) -> None:
    """A tiny random Whisper checkpoint beside ``output``, converted into ``output``."""
    import mobius
    from mobius.testing.seq2seq import tiny_seq2seq

    checkpoint = output.with_name(output.name + "-hf")
    tiny_seq2seq("whisper", checkpoint)
    mobius.build(checkpoint).save(output, overwrite=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", type=Path, help="a directory mobius build wrote")
    parser.add_argument("--features", type=Path, help="log-mel features as .npy")
    parser.add_argument("--prefix", type=int, nargs="*", help="forced decoder prefix token ids")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument(
        "--tiny", action="store_true", help="make and convert a tiny random Whisper"
    )
    args = parser.parse_args()
    if args.tiny:
        make_tiny(args.package)
    runner = Seq2SeqRunner(args.package)
    if args.features is not None:
        features = np.load(args.features).astype(np.float32)
    else:  # the encoder's full window of frames, as Whisper expects
        config = json.loads((args.package / "config.json").read_text())
        shape = (1, config["num_mel_bins"], 2 * config["max_source_positions"])
        features = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    prefix = args.prefix or [runner.manifest["decoder_start_token_id"]]
    tokens = runner.generate(
        input_features=features,
        decoder_input_ids=np.array([prefix], dtype=np.int64),
        max_new_tokens=args.max_new_tokens,
        eos_token_id=runner.manifest.get("eos_token_id"),
    )
    new = tokens[0, len(prefix) :].tolist()
    tokenizer_file = args.package / "tokenizer.json"
    if tokenizer_file.exists():
        from tokenizers import Tokenizer

        print(Tokenizer.from_file(str(tokenizer_file)).decode(new, skip_special_tokens=True))
    else:
        print(new)


if __name__ == "__main__":
    main()
