"""Run an encoder–decoder package with onnxruntime: encode once, then decode greedily.

Uses only onnxruntime and numpy, and the names of CONTRACTS.md ("Encoder–decoder tasks")::

    runner = Seq2SeqRunner("out/")
    tokens = runner.generate(input_ids=ids, attention_mask=mask, max_new_tokens=20)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np


class Seq2SeqRunner:
    """``encoder_model.onnx`` and ``decoder_model.onnx`` of one mobius package."""

    def __init__(self, directory: str | os.PathLike, providers: list[str] | None = None) -> None:
        import onnxruntime as ort

        self.directory = Path(directory)
        self.manifest = json.loads((self.directory / "mobius.json").read_text(encoding="utf-8"))
        providers = providers or ["CPUExecutionProvider"]
        self.encoder = ort.InferenceSession(
            str(self.directory / "encoder_model.onnx"), providers=providers
        )
        self.decoder = ort.InferenceSession(
            str(self.directory / "decoder_model.onnx"), providers=providers
        )
        self._decoder_inputs = {i.name for i in self.decoder.get_inputs()}
        self.layers = sum(1 for n in self._decoder_inputs if n.endswith(".decoder.key"))

    def encode(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        """``last_hidden_state`` and every layer's ``present.{i}.encoder.key/value``."""
        names = [o.name for o in self.encoder.get_outputs()]
        return dict(zip(names, self.encoder.run(names, inputs), strict=True))

    def empty_cache(self, encoded: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The decoder's self-attention cache before the first step: no tokens yet."""
        key = encoded["present.0.encoder.key"]
        empty = np.zeros((key.shape[0], key.shape[1], 0, key.shape[3]), dtype=key.dtype)
        return {
            f"past_key_values.{i}.decoder.{kind}": empty
            for i in range(self.layers)
            for kind in ("key", "value")
        }

    def decode(
        self,
        input_ids: np.ndarray,
        encoded: dict[str, np.ndarray],
        cache: dict[str, np.ndarray],
        encoder_attention_mask: np.ndarray | None = None,
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One decoder call: logits for ``input_ids`` and the grown self-attention cache."""
        feeds = {"input_ids": input_ids.astype(np.int64), **cache}
        for i in range(self.layers):
            for kind in ("key", "value"):
                feeds[f"past_key_values.{i}.encoder.{kind}"] = encoded[
                    f"present.{i}.encoder.{kind}"
                ]
        if "encoder_attention_mask" in self._decoder_inputs:
            feeds["encoder_attention_mask"] = encoder_attention_mask.astype(np.int64)
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(zip(names, self.decoder.run(names, feeds), strict=True))
        grown = {
            name.replace("present.", "past_key_values.", 1): value
            for name, value in out.items()
            if name.startswith("present.")
        }
        return out["logits"], grown

    def generate(
        self,
        *,
        max_new_tokens: int,
        decoder_input_ids: np.ndarray | None = None,
        eos_token_id: int | list[int] | None = None,
        **encoder_inputs: np.ndarray,
    ) -> np.ndarray:
        """Greedy decoding: the prefix (``decoder_start_token_id`` by default) then up to
        ``max_new_tokens`` argmax tokens, ``[batch, prefix + new]``; rows that reached
        ``eos_token_id`` (one id or several) continue with it."""
        stops = [] if eos_token_id is None else np.atleast_1d(eos_token_id).tolist()
        encoded = self.encode(**encoder_inputs)
        batch = encoded["last_hidden_state"].shape[0]
        if decoder_input_ids is None:
            start = self.manifest["decoder_start_token_id"]
            decoder_input_ids = np.full((batch, 1), start, dtype=np.int64)
        tokens = decoder_input_ids.astype(np.int64)
        mask = encoder_inputs.get("attention_mask")
        cache = self.empty_cache(encoded)
        step_ids = tokens
        done = np.zeros(batch, dtype=bool)
        for _ in range(max_new_tokens):
            logits, cache = self.decode(step_ids, encoded, cache, mask)
            nxt = logits[:, -1].argmax(-1)
            if stops:
                nxt = np.where(done, stops[0], nxt)
                done |= np.isin(nxt, stops)
            step_ids = nxt[:, None].astype(np.int64)
            tokens = np.concatenate([tokens, step_ids], axis=1)
            if stops and done.all():
                break
        return tokens
