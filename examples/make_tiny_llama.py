"""Build the bundled example checkpoint ``examples/tiny-llama``: a tiny random-weight Llama.

Everything is made locally and deterministically (no network, no hub): a byte-level BPE tokenizer
trained on the paragraph below, a 2-layer Llama whose every parameter (norm weights included) is
random, and a generation config. Re-running the script reproduces the same files byte for byte.

    python examples/make_tiny_llama.py            # writes examples/tiny-llama/
    mobius build --model examples/tiny-llama --output /tmp/tiny-llama-onnx
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path

# the tokenizer trainer may use threads; keep it single-threaded so the merges never depend on timing
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import torch  # noqa: E402

SEED = 0
VOCAB_SIZE = 512
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0..3
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "tiny-llama"

CORPUS = """\
Mobius turns a HuggingFace checkpoint into an ONNX model that runs anywhere onnxruntime does.
It reads the configuration, traces the model on the meta device without allocating its weights,
lowers every operation to ONNX, and streams the tensors from the safetensors files straight into
the external data file, casting them on the way when a smaller dtype is asked for. The tokenizer,
the generation settings and the configuration travel with the converted model, so the output
directory is all that a runtime needs. This tiny model has random weights: it says nothing useful,
but it is small enough to convert in a second and to ship inside the repository as an example.
The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs.
Numbers such as 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 42, 100 and 2024 appear in text as well,
together with punctuation: commas, periods, colons, semicolons, (parentheses) and "quotes".
"""


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass


def train_tokenizer(vocab_size: int):
    """A byte-level BPE trained on CORPUS, wrapped as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # repeat the lines so that every pair has a count, and the trainer reaches the vocabulary size
    lines = CORPUS.splitlines()
    tok.train_from_iterator(lines * 4, trainer=trainer, length=len(lines) * 4)
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=256,
        clean_up_tokenization_spaces=False,
    )


def make(output: Path, seed: int = SEED) -> Path:
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from mobius.testing.tiny import randomize

    seed_everything(seed)
    tokenizer = train_tokenizer(VOCAB_SIZE)
    vocab = len(tokenizer)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    model = LlamaForCausalLM(config).eval()
    randomize(model, seed)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=32,
    )

    output.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="checkpoint directory to write"
    )
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    out = make(args.output, args.seed)
    total = sum(p.stat().st_size for p in out.iterdir() if p.is_file())
    print(
        f"wrote {out} ({total / 1024:.0f} KiB): {', '.join(sorted(p.name for p in out.iterdir()))}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
