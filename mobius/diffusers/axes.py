"""Names of the diffusers contracts' input axes beyond batch and sequence (CONTRACTS.md,
"Diffusers pipelines"): what each dynamic dimension of a component's inputs is called.

A leaf: the contracts (``tasks.py``) and the family modules that size their own axes
(``family_sizes.py``) import it; it imports nothing of mobius.
"""

from __future__ import annotations

HEIGHT, WIDTH = "height", "width"
IMAGE_SEQUENCE = "image_sequence_length"  # patch tokens of a transformer taking packed latents
FRAMES = "num_frames"  # video latents: [batch, channels, frames, height, width]
LENGTH = "sample_length"  # 1D latents: [batch, channels, length]
TEXT_AND_IMAGE = "text_and_image_length"  # a prompt's tokens then the image's patch tokens
BATCH_FRAMES = "batch_frames"  # frames folded into the batch: batch * num_frames rows
SEQUENCE_2 = "sequence_length_2"  # a second text, of a length other than the first's
PATCHES = "patch_count"  # one token per patch of unpacked latents: (height / p) * (width / p)
PACKED = "packed_length"  # one packed sequence: the prompt, the video's and the audio's tokens
NOISE_LEVELS = "noise_levels"  # the distinct noise levels of a packed sequence's rows
SAMPLE_HEIGHT = "sample_height"  # a VAE's image beside its latents: 2x per level but the last
SAMPLE_WIDTH = "sample_width"
TEXT_LAYERS = "text_encoder_layers"  # a text encoder's hidden states, layer by layer (HiDream)
INPUT_HEIGHT, INPUT_WIDTH = "input_height", "input_width"  # an input image's latents (OmniGen)
TEXT_TIME_IMAGE = "text_time_image_length"  # OmniGen: the prompt, a time token, the patches
SAMPLE_FRAMES = "sample_frames"  # a video decoder's frames beside its latents' (LTX-2's)
POSE_FRAMES = "pose_frames"  # Wan Animate's pose latents: one frame fewer than the video's
FACE_FRAMES = "face_frames"  # Wan Animate's face video: 4 (pose frames - 1) + 1 pixel frames
REFERENCES = "reference_count"  # packed references, each tagged with its batch row (ACE-Step)
# Wan Animate 2's cached reference tokens: one patch frame fewer than the latents', same grid
REFERENCE_TOKENS = "reference_length"
