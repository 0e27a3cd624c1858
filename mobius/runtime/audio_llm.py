"""Run a converted speech LLM with plain onnxruntime: the graphs of CONTRACTS.md ("Speech and
audio LLMs"), the audio instance of ``runtime/vlm.py``'s loop: ``audio_encoder`` once per
prompt's clips (and ``vision_encoder`` once per prompt's images, for a model that takes both),
``embedding`` on the prompt with those rows, ``decoder_model`` with the cache fed back; later
steps embed the new token alone."""

from __future__ import annotations

import numpy as np

from mobius.runtime.vlm import OnnxVisionLanguageModel

# the graphs a package of this layout may hold: vision_encoder only where the model takes images
GRAPHS = ("vision_encoder", "audio_encoder", "embedding", "decoder_model")


class OnnxAudioLanguageModel(OnnxVisionLanguageModel):
    """The graphs of a converted speech LLM (``mobius.json`` ``"layout": "audio-llm"``; its
    ``modalities`` say which encoders there are). The image side (``vision``, multi-axis
    ``positions``) is the VLM runner's; ``embedding``'s ``more`` takes the image rows."""

    graph_names = GRAPHS
    features_input = "audio_features"

    def audio_features(self, with_images: bool = False, **audio: np.ndarray) -> np.ndarray:
        """``audio_encoder``: ``[num_audio_tokens, hidden]`` for every clip given (the inputs the
        graph does not take are ignored). What a processor leaves out is filled in: Phi-4-
        multimodal's ``audio_attention_mask`` for one clip (every frame real) and its
        ``audio_projection_mode`` (1 where the prompt has images: ``with_images``)."""
        session = self.sessions["audio_encoder"]
        audio = {**_filled(audio, with_images), **audio}
        feeds = {}
        for spec in session.get_inputs():
            value = np.asarray(audio[spec.name])
            feeds[spec.name] = value.astype(np.int64 if "int64" in spec.type else np.float32)
        return session.run(None, feeds)[0]

    @property
    def audio_token_id(self) -> int:
        return self.manifest["audio_token_id"]


def _filled(audio: dict[str, np.ndarray], with_images: bool) -> dict[str, np.ndarray]:
    """The inputs Phi-4-multimodal's processor does not give: the mask of one clip, which it
    leaves out, and the projection mode, which the HF forward chooses by the call's images."""
    filled = {"audio_projection_mode": np.array([int(with_images)], dtype=np.int64)}
    features = audio.get("audio_input_features")
    if features is not None:
        filled["audio_attention_mask"] = np.ones(np.shape(features)[:2], dtype=np.int64)
    return filled
