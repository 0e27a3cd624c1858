"""Run a converted causal LM with plain onnxruntime: prefill, decode steps, greedy tokens.

The loop onnxruntime-genai runs, written out for when it is not installed (and for the tests):
the first call feeds empty caches; each later call feeds the last token, the mask grown by one
column, its position, and every ``present.{i}.*`` back as ``past_key_values.{i}.*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

MODEL_FILE = "model.onnx"
# onnxruntime's type names for cache inputs that are not float32 (Qwen4-Exp keeps its indexer's
# position ids, int64, in the cache)
_NUMPY_TYPES = {
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(double)": np.float64,
    "tensor(float8e4m3fn)": np.uint8,  # --features fp8-kv-cache: held as its bit patterns
}
_FLOAT8 = "tensor(float8e4m3fn)"


def session(directory: str | Path, *, threads: int = 0):
    """An onnxruntime CPU session for ``directory/model.onnx`` (``threads`` 0: onnxruntime's choice)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    try:
        return ort.InferenceSession(
            str(Path(directory) / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )
    except ort.capi.onnxruntime_pybind11_state.NotImplemented as exc:
        if _dtype(directory) != "bf16":
            raise
        from mobius.errors import UnsupportedError

        raise UnsupportedError(
            "onnxruntime's CPU execution provider has no bfloat16 kernel for some ops of this "
            "bf16 graph; run it on CUDA, or build with --dtype f16 or f32 for the CPU"
        ) from exc


def _dtype(directory: str | Path) -> str | None:
    """The build dtype recorded in ``mobius.json`` (None when unreadable)."""
    import json

    try:
        return json.loads((Path(directory) / "mobius.json").read_text(encoding="utf-8"))["dtype"]
    except (OSError, ValueError, KeyError):
        return None


def _float8_value(bits: np.ndarray):
    """An onnxruntime FLOAT8E4M3FN tensor from uint8 bit patterns."""
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        np.ascontiguousarray(bits), 17
    )  # TensorProto.FLOAT8E4M3FN


class OnnxCausalLM:
    """Drives a converted causal LM with its cache: prefill, decode steps and greedy generation."""

    def __init__(self, directory: str | Path, *, threads: int = 0) -> None:
        self.session = session(directory, threads=threads)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.cache_names = [n for n in self.inputs if n.startswith("past_key_values.")]
        self.output_names = [o.name for o in self.session.get_outputs()]

    @property
    def has_cache(self) -> bool:
        return bool(self.cache_names)

    def empty_cache(self, batch: int) -> dict[str, np.ndarray]:
        """The cache before the first call: no past tokens, and zero recurrent states."""
        cache = {}
        for name in self.cache_names:
            dims = self.inputs[name].shape
            dtype = _NUMPY_TYPES.get(self.inputs[name].type, np.float32)
            shape = [batch if d == "batch" else d if isinstance(d, int) else 0 for d in dims]
            cache[name] = np.zeros(shape, dtype=dtype)
        return cache

    def run(
        self, ids, mask, positions, cache: dict[str, np.ndarray]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One call: logits for ``ids`` and the cache after them."""
        feeds = {
            "input_ids": np.asarray(ids, dtype=np.int64),
            "attention_mask": np.asarray(mask, dtype=np.int64),
            "position_ids": np.asarray(positions, dtype=np.int64),
        }
        feeds = {k: v for k, v in feeds.items() if k in self.inputs}
        feeds.update(cache)
        for name in self.cache_names:
            if self.inputs[name].type == _FLOAT8:  # numpy has no float8: pass the bits, typed
                feeds[name] = _float8_value(feeds[name])
        outputs = dict(zip(self.output_names, self.session.run(None, feeds), strict=True))
        present = {
            n.replace("present.", "past_key_values.", 1): v
            for n, v in outputs.items()
            if n.startswith("present.")
        }
        return outputs["logits"], present

    def generate(self, ids: np.ndarray, mask: np.ndarray, new_tokens: int) -> np.ndarray:
        """Greedy decoding of a (left-padded) batch; the tokens [batch, new_tokens], no early stop."""
        ids, mask = np.asarray(ids), np.asarray(mask)
        positions = np.clip(mask.cumsum(-1) - 1, 0, None)
        tokens = [token for token, _, _ in self._greedy(ids, mask, positions, new_tokens)]
        return np.concatenate(tokens, axis=1)

    def stream(
        self, ids: Iterable[int], max_new_tokens: int, stop: Iterable[int] = ()
    ) -> Iterator[int]:
        """Greedy tokens for one prompt, yielded as they come; ends after a token in ``stop``."""
        ids = np.asarray([list(ids)], dtype=np.int64)
        mask = np.ones_like(ids)
        positions = np.arange(ids.shape[1], dtype=np.int64)[None]
        stop = set(stop)
        for token, _, _ in self._greedy(ids, mask, positions, max_new_tokens):
            value = int(token[0, 0])
            yield value
            if value in stop:
                return

    def _greedy(self, ids, mask, positions, new_tokens: int):
        """Yield (token [batch, 1], mask, positions) per step; computes a step only when asked."""
        if new_tokens <= 0:
            return
        logits, cache = self.run(ids, mask, positions, self.empty_cache(ids.shape[0]))
        for step in range(new_tokens):
            token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
            mask = np.concatenate([mask, np.ones_like(token)], axis=1)
            positions = positions[:, -1:] + 1
            yield token, mask, positions
            if step + 1 < new_tokens:
                logits, cache = self.run(token, mask, positions, cache)
