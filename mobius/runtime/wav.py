"""PCM WAV files as float32 mono samples (no audio library needed): what ``mobius generate
--audio`` and ``mobius verify --audio`` read."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from mobius.errors import ConfigError

__all__ = ["read_wav"]


def read_wav(path: str | Path, rate: int) -> np.ndarray:
    """A PCM WAV file as float32 mono samples in [-1, 1] at ``rate`` Hz (channels averaged;
    another sampling rate is resampled linearly)."""
    try:
        with wave.open(str(path), "rb") as clip:
            width, channels = clip.getsampwidth(), clip.getnchannels()
            own_rate, raw = clip.getframerate(), clip.readframes(clip.getnframes())
    except (OSError, EOFError, wave.Error) as exc:
        raise ConfigError(f"could not read {path} as a PCM WAV file: {exc}") from exc
    kinds = {1: (np.uint8, 128.0, 128.0), 2: (np.int16, 0.0, 32768.0), 4: (np.int32, 0.0, 2**31)}
    if width not in kinds:
        raise ConfigError(f"{path}: {8 * width}-bit samples; mobius reads 8, 16 or 32-bit PCM")
    dtype, offset, scale = kinds[width]
    samples = (np.frombuffer(raw, dtype=dtype).astype(np.float32) - offset) / scale
    samples = samples.reshape(-1, channels).mean(axis=1)
    if own_rate != rate and len(samples):
        times = np.arange(int(len(samples) * rate / own_rate)) * (own_rate / rate)
        samples = np.interp(times, np.arange(len(samples)), samples).astype(np.float32)
    return samples
