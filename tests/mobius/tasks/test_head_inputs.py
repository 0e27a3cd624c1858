"""The inputs a head task declares for speech models that take spectrograms (CONTRACTS.md)."""

import torch

from mobius.sources.config import from_hf
from mobius.tasks import TASKS
from mobius.testing.configs import tiny_config_for


def _inputs(model_type: str, task: str) -> dict[str, tuple]:
    config = from_hf(tiny_config_for(model_type))
    head = TASKS[task]
    with torch.device("meta"):
        model = head.auto_class(config).from_config(config.hf_config)
    return {s.name: s.dims for s in head.inputs(config, model)}


def test_a_ctc_speech_encoder_takes_frames_of_features_and_a_frame_mask():
    config = tiny_config_for("parakeet_ctc")
    dims = _inputs("parakeet_ctc", "automatic-speech-recognition")
    width = config.encoder_config.num_mel_bins
    assert dims == {
        "input_features": ("batch", "num_frames", width),
        "attention_mask": ("batch", "num_frames"),
    }
