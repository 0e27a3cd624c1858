"""Drive a ``--features static-cache`` graph with plain onnxruntime, the buffers shared in place.

Each ``past_key_values.{i}.*`` buffer is allocated once, ``[batch, kv_heads, max_seq_len,
head_dim]``, and bound (``IOBinding``) as both the input and its ``present.{i}.*`` output, so
``TensorScatter`` writes the new keys and values into it and no step allocates a cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from mobius.runtime.causal_lm import MODEL_FILE

_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class StaticCacheLM:
    """Prefill and decode steps of a static-cache graph (left-padded batches)."""

    def __init__(self, directory: str | Path, *, threads: int = 0) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(
            str(Path(directory) / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.cache_names = [n for n in self.inputs if n.startswith("past_key_values.")]
        self.buffers: dict = {}

    @property
    def max_seq_len(self) -> int:
        return int(self.inputs[self.cache_names[0]].shape[2])

    def reset(self, batch: int) -> None:
        """Allocate (once per batch size) and zero the buffers."""
        import onnxruntime as ort

        for name in self.cache_names:
            info = self.inputs[name]
            shape = [batch, *info.shape[1:]]
            held = self.buffers.get(name)
            if held is None or held.shape()[0] != batch:
                zeros = np.zeros(shape, dtype=_NUMPY.get(info.type, np.float32))
                self.buffers[name] = ort.OrtValue.ortvalue_from_numpy(zeros)
            else:
                held.numpy()[...] = 0  # numpy() of a CPU OrtValue is a view of its memory

    def run(self, ids, mask, positions) -> np.ndarray:
        """Logits for ``ids``; the buffers now also hold their keys and values."""
        import onnxruntime as ort

        binding = self.session.io_binding()
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        for name, array in feeds.items():
            if name in self.inputs:
                value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array, np.int64))
                binding.bind_ortvalue_input(name, value)
        for name in self.cache_names:
            binding.bind_ortvalue_input(name, self.buffers[name])
            binding.bind_ortvalue_output(
                name.replace("past_key_values.", "present.", 1), self.buffers[name]
            )
        binding.bind_output("logits")
        self.session.run_with_iobinding(binding)
        return binding.get_outputs()[-1].numpy()  # in binding order: logits is bound last

    def stream(
        self, ids: Iterable[int], max_new_tokens: int, stop: Iterable[int] = ()
    ) -> Iterator[int]:
        """Greedy tokens for one prompt, as :meth:`mobius.runtime.causal_lm.OnnxCausalLM.stream`;
        stops after a token in ``stop`` or when the buffers are full."""
        ids = np.asarray([list(ids)], dtype=np.int64)
        mask = np.ones_like(ids)
        positions = np.arange(ids.shape[1], dtype=np.int64)[None]
        self.reset(1)
        logits = self.run(ids, mask, positions)
        stop = set(stop)
        for _ in range(max_new_tokens):
            token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
            yield int(token[0, 0])
            if int(token[0, 0]) in stop or mask.shape[1] >= self.max_seq_len:
                return
            mask = np.concatenate([mask, np.ones_like(token)], axis=1)
            positions = positions[:, -1:] + 1
            logits = self.run(token, mask, positions)

    def generate(self, ids: np.ndarray, mask: np.ndarray, new_tokens: int) -> np.ndarray:
        """Greedy tokens ``[batch, new_tokens]`` for a left-padded batch (no early stop)."""
        ids, mask = np.asarray(ids, np.int64), np.asarray(mask, np.int64)
        self.reset(ids.shape[0])
        positions = np.clip(mask.cumsum(-1) - 1, 0, None)
        logits = self.run(ids, mask, positions)
        tokens = []
        for step in range(new_tokens):
            token = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            mask = np.concatenate([mask, np.ones_like(token)], axis=1)
            positions = positions[:, -1:] + 1
            if step + 1 < new_tokens:
                logits = self.run(token, mask, positions)
        return np.concatenate(tokens, axis=1)


def is_static(directory: str | Path) -> bool:
    """Whether ``directory`` holds a ``--features static-cache`` build (from mobius.json)."""
    import json

    info = Path(directory) / "mobius.json"
    if not info.is_file():
        return False
    return "static-cache" in json.loads(info.read_text(encoding="utf-8")).get("features", [])
