"""Tiny VLMs whose random vision side would leave float32's resolution: a realistic weight scale.

``randomize`` draws every matrix with std 0.3 whatever its fan-in, so each linear layer or
convolution multiplies activations by about ``0.3 * sqrt(fan_in)``. In most towers norms keep
that in check; in a few, un-normed projector stacks (wide merges, convolutional upsamplers)
compound it, and the tiny model's image features reach 1e3–1e5. There float32 itself cannot hold
1e-4: HF's own float32 forward differs from its float64 forward by as much as the ONNX graph
does (measured: got_ocr2 3.3e-4, cohere2_vision 6.2e-4, minimax_m3_vl 6.5e-2), so a comparison at
atol 1e-4 measures rounding, not conversion (also step3p7, whose two un-normed stride-2
downsampling convolutions make features of 2.4e3: HF's float32 vs float64 1.7e-3; and
deepseek_vl_hybrid, whose high-resolution SAM tower ends in two un-normed stride-2 3 x 3
convolutions before the aligner: features of 8.6e3, HF's float32 vs float64 1.9e-2, the graph
2.1e-2). Trained models keep activations O(1). For these types the vision side's matrices (everything outside the
language model) are redrawn with std ``1 / sqrt(fan_in)``, the scale that keeps activations
O(1), so features stay where float32 holds 1e-4. The tolerance is unchanged.

MiniCPM-V 4.6 (features up to 24) is the same case one step later: its text model (Qwen3.5,
gated delta rule) amplifies the features' float32 rounding at the prompt's last position. Against
HF's float64 forward (measured): the graph's features 1.4e-5 off, its prefill logits 1.7e-4 (HF's
own float32 logits 4.8e-5); the graph's decoder given the float64 features 6.2e-5. So the excess
is the features' rounding, not the conversion. Qwen4-Exp likewise (features up to 32; one input's
prefill logits 1.07e-4 off HF's float64 at one position where HF's float32 is 7.4e-6 off; the
graph's decoder given HF's float32 or float64 features 1.3e-5 and 1.9e-5 there). MiniCPM-OCR
likewise (features up to 26, the same text model): against HF's float64 forward the graph's
features 2.1e-5 off (HF's float32 1.5e-5), its prefill logits 1.09e-4 (HF's float32 2.6e-5); the
graph's decoder given the float64 features 3.5e-5. Scaled, its last position is 1.35e-5 off; its
worst prompt position (9.6e-5) is one where HF's own float32 is 3.1e-4 off its float64 (the graph
4.0e-4): rounding there too.
"""

from __future__ import annotations

import math

import torch

# types whose tiny features exceed float32's 1e-4 resolution with std-0.3 weights (measured above;
# lfm3_vl with two images: features up to 126, HF's float32 1.05e-4 off its float64; cosmos3_edge
# with two images: features up to 170, HF's float32 1.3e-4 off its float64, the graph 1.4e-4)
FAN_IN_SCALED = frozenset(
    {
        "cohere2_vision",
        "got_ocr2",
        "pp_chart2table",
        "minimax_m3_vl",
        "minicpmv4_6",
        "step3p7",
        "lfm3_vl",
        "cosmos3_edge",
        "deepseek_vl_hybrid",  # both towers: the SigLIP one and the SAM high-resolution one
        "unlimited_ocr",  # SAM then CLIP: features up to 320, HF's float32 1.7e-4 off its float64
        "qwen4_exp",  # features up to 32, their rounding amplified by the text model (as minicpmv4_6)
        "minicpm_ocr",  # features up to 26, the same (measured above)
    }
)


def _language_side(model: torch.nn.Module) -> set[int]:
    """The ids of the language model's and head's parameters."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    ids = {id(p) for p in decoder.parameters()} if decoder is not None else set()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        ids |= {id(p) for p in head.parameters()}
    return ids


def fan_in_scaled(model: torch.nn.Module, model_type: str, seed: int = 0) -> None:
    """For a type in :data:`FAN_IN_SCALED`: each vision-side matrix (linear, convolution) redrawn
    with std ``1 / sqrt(fan_in)``; vectors (biases, norms) keep their random values."""
    if model_type not in FAN_IN_SCALED:
        return
    gen = torch.Generator().manual_seed(seed + 1)
    language = _language_side(model)
    with torch.no_grad():
        for param in model.parameters():
            if id(param) in language or param.dim() < 2:
                continue
            fan_in = math.prod(param.shape[1:])
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            param.copy_((noise / math.sqrt(fan_in)).to(param.dtype))
