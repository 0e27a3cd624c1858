"""Transcription from a converted speech LLM's directory: ``mobius generate --audio FILE.wav``.

The model's own processor (saved beside the graphs) turns the clip and the prompt into the HF
inputs: its chat template places the audio placeholder, its feature extractor makes
``input_features`` and the mask, and it repeats the placeholder once per audio row. The three
graphs then run as ``runtime/audio_llm.py`` does: greedy decoding, stopping at an
end-of-sequence token.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from mobius.errors import ConfigError
from mobius.runtime.wav import read_wav

LAYOUT = "audio-llm"


def is_audio_llm(directory: Path) -> bool:
    info = directory / "mobius.json"
    if not info.is_file():
        return False
    return json.loads(info.read_text(encoding="utf-8")).get("layout") == LAYOUT


def load_processor(directory: Path) -> Any:
    """The HF processor saved beside the graphs."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(directory)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"{directory} has no processor the audio can be prepared with: {exc}"
        ) from exc


def processor_inputs(processor: Any, audio: np.ndarray, prompt: str | None) -> dict[str, Any]:
    """The HF processor's inputs for one clip and its prompt (the chat template's user turn with
    the audio first, where the processor has a template; else the audio token, then the prompt)."""
    text = prompt or getattr(processor, "default_transcription_prompt", None) or ""
    if getattr(processor, "chat_template", None):
        content = [{"type": "audio"}, {"type": "text", "text": text}]
        messages = [{"role": "user", "content": content}]
        text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        text = f"{processor.audio_token}{text}"
    rate = processor.feature_extractor.sampling_rate
    out = processor(text=[text], audio=[audio], sampling_rate=rate, return_tensors="pt")
    return {k: v.numpy() for k, v in out.items() if hasattr(v, "numpy")}


def transcribe(
    directory: str | Path,
    audio_file: str | Path,
    prompt: str | None = None,
    *,
    max_new_tokens: int = 128,
) -> Iterator[str]:
    """The model's greedy answer to ``audio_file`` (and ``prompt``), yielded as text pieces."""
    from mobius.runtime.audio_llm import OnnxAudioLanguageModel
    from mobius.runtime.generate import stop_tokens

    directory = Path(directory)
    runner = OnnxAudioLanguageModel(directory)
    processor = load_processor(directory)
    rate = processor.feature_extractor.sampling_rate
    inputs = processor_inputs(processor, read_wav(audio_file, rate), prompt)
    tokenizer = processor.tokenizer
    stop = stop_tokens(directory)
    tokens: list[int] = []
    shown = ""
    for token in greedy_tokens(runner, inputs, max_new_tokens):
        if token in stop:
            break
        tokens.append(token)
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if not text.endswith("\ufffd"):
            yield text[len(shown) :]
            shown = text


def greedy_tokens(runner: Any, inputs: dict[str, np.ndarray], max_new_tokens: int) -> Iterator[int]:
    """Greedy tokens of one prompt through the three graphs, the cache fed back at each step."""
    from mobius.runtime.vlm import next_positions

    ids, mask = inputs["input_ids"].astype(np.int64), inputs["attention_mask"].astype(np.int64)
    features = runner.audio_features(**inputs)
    positions = runner.positions(ids, mask)  # multi-axis where the decoder takes them
    logits, cache = runner.decode(
        runner.embed(ids, features), mask, positions, runner.empty_cache(len(ids))
    )
    for step in range(max_new_tokens):
        token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        yield int(token[0, 0])
        if step + 1 == max_new_tokens:
            return
        mask = np.concatenate([mask, np.ones_like(token)], axis=1)
        positions = next_positions(positions) if step == 0 else positions + 1
        logits, cache = runner.decode(runner.embed(token, None), mask, positions, cache)
