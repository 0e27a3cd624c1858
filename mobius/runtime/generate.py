"""Text in, text out, from a converted causal LM's directory: ``mobius generate``.

Two runtimes, one behaviour (greedy decoding, stop at an end-of-sequence token):

- ``genai``: onnxruntime-genai's ``Model`` / ``Generator`` and its tokenizer, from
  ``genai_config.json`` (written by ``mobius build``);
- ``onnxruntime``: plain onnxruntime (:class:`mobius.runtime.causal_lm.OnnxCausalLM`) and the
  transformers tokenizer saved beside the model.

``auto`` takes genai when it is installed and the directory has a ``genai_config.json``.
The chat template, when the tokenizer has one, wraps the prompt as one user turn unless
``chat=False``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from mobius.errors import ConfigError
from mobius.runtime.causal_lm import MODEL_FILE, OnnxCausalLM
from mobius.runtime.genai import GENAI_CONFIG_FILE

log = logging.getLogger("mobius")

RUNTIMES = ("auto", "genai", "onnxruntime")


def has_genai() -> bool:
    return importlib.util.find_spec("onnxruntime_genai") is not None


def chat_template(directory: Path) -> str | None:
    """The chat template saved beside the model (``chat_template.jinja`` or tokenizer_config's)."""
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = directory / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        return template if isinstance(template, str) else None
    return None


def pick_runtime(directory: Path, runtime: str = "auto") -> str:
    """``genai`` or ``onnxruntime``; refuses a directory that is not a converted model."""
    if not (directory / MODEL_FILE).is_file():
        raise ConfigError(f"{directory} has no {MODEL_FILE}; convert a model with `mobius build`")
    info = directory / "mobius.json"
    task = json.loads(info.read_text(encoding="utf-8")).get("task") if info.is_file() else None
    if task not in (None, "text-generation", "causal-lm"):  # causal-lm: builds before the rename
        raise ConfigError(f"{directory} holds a {task} model; generate needs a text-generation one")
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown runtime '{runtime}'; choose one of: {', '.join(RUNTIMES)}")
    has_config = (directory / GENAI_CONFIG_FILE).is_file()
    if runtime == "genai" and not has_genai():
        raise ConfigError("onnxruntime-genai is not installed; pip install onnxruntime-genai")
    if runtime == "genai" and not has_config:
        raise ConfigError(
            f"{directory} has no {GENAI_CONFIG_FILE} (its cache is not one genai can drive; "
            "see the build log); use --runtime onnxruntime"
        )
    if runtime == "auto":
        return "genai" if has_config and has_genai() else "onnxruntime"
    return runtime


def stop_tokens(directory: Path) -> set[int]:
    """End-of-sequence ids from generation_config.json, else config.json."""
    for name in ("generation_config.json", "config.json"):
        path = directory / name
        if path.is_file():
            eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
            if eos is not None:
                return {int(e) for e in (eos if isinstance(eos, list) else [eos])}
    return set()


def generate(
    directory: str | Path,
    prompt: str,
    *,
    max_new_tokens: int = 128,
    chat: bool | None = None,
    runtime: str = "auto",
    adapter: str | Path | None = None,
) -> Iterator[str]:
    """Greedy continuation of ``prompt``, yielded as text pieces while it is generated.

    ``chat`` None applies the chat template when the model has one; True requires one.
    ``adapter``: an ``.onnx_adapter`` file made active (onnxruntime-genai only). Bad
    arguments raise here, before the iterator is returned.
    """
    directory = Path(directory)
    chosen = pick_runtime(directory, runtime)
    if adapter is not None and chosen != "genai":
        raise ConfigError("--adapter runs on onnxruntime-genai; install it or use --runtime genai")
    template = chat_template(directory)
    if chat and template is None:
        raise ConfigError(f"{directory} has no chat template; drop --chat")
    use_template = template if chat is not False else None
    if chosen == "genai":
        return _genai_text(directory, prompt, max_new_tokens, use_template, adapter)
    return _onnxruntime_text(directory, prompt, max_new_tokens, use_template)


def _messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


def genai_tokens(
    directory: Path, ids: list[int], max_new_tokens: int, adapter: str | Path | None = None
) -> Iterator[int]:
    """Greedy tokens from onnxruntime-genai for a tokenized prompt (stops at end of sequence)."""
    model = genai_model(directory)
    yield from _genai_loop(model, ids, max_new_tokens, adapter)


def _genai_loop(
    model, ids: list[int], max_new_tokens: int, adapter: str | Path | None = None
) -> Iterator[int]:
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + max_new_tokens)
    generator = og.Generator(model, params)
    if adapter is not None:
        from mobius.runtime.genai_adapters import GenaiAdapters

        adapters = GenaiAdapters(model)  # kept alive as long as the generator
        adapters.activate(generator, adapter)
    generator.append_tokens(list(ids))
    while not generator.is_done():
        generator.generate_next_token()
        yield int(generator.get_next_tokens()[0])


def _genai_text(
    directory: Path,
    prompt: str,
    max_new_tokens: int,
    template: str | None,
    adapter: str | Path | None = None,
) -> Iterator[str]:
    import onnxruntime_genai as og

    model = genai_model(directory)
    tokenizer = og.Tokenizer(model)
    if template is not None:
        prompt = tokenizer.apply_chat_template(
            json.dumps(_messages(prompt)), template_str=template, add_generation_prompt=True
        )
    stream = tokenizer.create_stream()
    for token in _genai_loop(model, list(tokenizer.encode(prompt)), max_new_tokens, adapter):
        yield stream.decode(token)


def _driver(directory: Path):
    """The plain-onnxruntime driver for the build: in-place buffers for ``static-cache``."""
    from mobius.runtime.static import StaticCacheLM, is_static

    return StaticCacheLM(directory) if is_static(directory) else OnnxCausalLM(directory)


def _onnxruntime_text(
    directory: Path, prompt: str, max_new_tokens: int, template: str | None
) -> Iterator[str]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    if template is not None:
        ids = tokenizer.apply_chat_template(
            _messages(prompt), chat_template=template, add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt)["input_ids"]
    stop = stop_tokens(directory)
    tokens: list[int] = []
    shown = ""
    for token in _driver(directory).stream(ids, max_new_tokens, stop):
        if token in stop:
            break
        tokens.append(token)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
            yield text[len(shown) :]
            shown = text


def genai_model(directory: str | Path):
    """``onnxruntime_genai.Model`` for ``directory``; when the provider its genai_config.json names
    (``--ep cuda``/``dml``/``webgpu``) cannot be loaded here, the same graph on genai's CPU
    provider instead, with a warning (the GPU forms have CPU kernels)."""
    import onnxruntime_genai as og

    try:
        return og.Model(str(directory))
    except RuntimeError as exc:
        config = json.loads((Path(directory) / "genai_config.json").read_text(encoding="utf-8"))
        options = config["model"]["decoder"]["session_options"].get("provider_options") or []
        if not options:
            raise
        names = ", ".join(name for option in options for name in option)
        log.warning("onnxruntime-genai cannot use %s here (%s); running on the CPU", names, exc)
        cpu = og.Config(str(directory))
        cpu.clear_providers()
        return og.Model(cpu)
