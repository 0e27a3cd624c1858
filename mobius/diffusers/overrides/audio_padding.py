"""Audio VAEs that right-pad a waveform to a whole number of hops only ``if`` the padding is
not zero: the trace keeps the branch of the traced length, so a graph traced at a multiple of
the hop drops the padding for every other length (MiniMax-H3, Cosmos3 and SAME's encoders gave
one latent frame too few at 43 samples for a hop of 8; SAME's resampling blocks pad their
segments alike, ACE-Step's DiT its latents to a whole number of patches). Padding by zero samples changes
nothing, so the overrides always pad; the rest is each encoder's own code."""

from __future__ import annotations

import sys
import types

import torch
import torch.nn.functional as F


def _pad_to_hop(sample: torch.Tensor, hop: int) -> torch.Tensor:
    return F.pad(sample, (0, (hop - sample.shape[-1] % hop) % hop))


def minimax_h3_always_pads(module: torch.nn.Module) -> None:
    # AutoencoderKLMiniMaxH3Audio.encode
    diffusers_module = sys.modules[type(module).__module__]

    def encode(self: torch.nn.Module, sample: torch.Tensor, return_dict: bool = True) -> object:
        sample = _pad_to_hop(sample, self.hop_length)
        encoder_dtype = diffusers_module.get_parameter_dtype(self.encoder)
        hidden_states = self.encoder(sample.to(encoder_dtype))
        hidden_states = self.pre_block(hidden_states.transpose(1, 2)).transpose(1, 2)
        mean, logs = self.mean_proj(hidden_states), self.logs_proj(hidden_states)
        if encoder_dtype != torch.float32:
            mean, logs = mean.float(), logs.float()
        posterior = diffusers_module.MiniMaxH3AudioDiagonalGaussianDistribution(mean, logs)
        if not return_dict:
            return (posterior,)
        return diffusers_module.MiniMaxH3AudioEncoderOutput(latent_dist=posterior)

    module.encode = types.MethodType(encode, module)


def cosmos3_always_pads(module: torch.nn.Module) -> None:
    # Cosmos3AVAEAudioTokenizer.encode (in eval mode, where it pads)
    diffusers_module = sys.modules[type(module).__module__]

    def encode(self: torch.nn.Module, sample: torch.Tensor, return_dict: bool = True,
               force_pad: bool = False) -> object:  # fmt: skip
        hidden_states = sample
        if self.config.normalize_volume:
            hidden_states = hidden_states / (hidden_states.abs().max() + 1e-5) * 0.95
        hidden_states = _pad_to_hop(hidden_states, self._hop_size)
        encoder_dtype = diffusers_module.get_parameter_dtype(self.encoder)
        moments = self._encode(hidden_states.to(dtype=encoder_dtype))
        posterior = diffusers_module.OobleckDiagonalGaussianDistribution(moments)
        if not return_dict:
            return (posterior,)
        return diffusers_module.Cosmos3AudioEncoderOutput(latent_dist=posterior)

    module.encode = types.MethodType(encode, module)


def same_patches_always_pad(module: torch.nn.Module) -> None:
    # the PatchEmbed of AutoencoderSAME: encode
    def encode(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        patch = self.patch_size
        x = _pad_to_hop(x, patch)
        batch, channels, length = x.shape
        x = x.reshape(batch, channels, length // patch, patch).permute(0, 1, 3, 2)
        return x.reshape(batch, channels * patch, length // patch)

    module.encode = types.MethodType(encode, module)


def same_segments_always_pad(module: torch.nn.Module) -> None:
    # SAMETransformerResamplingBlock._encode pads to a multiple of its stride the same way:
    # padded first, its own check then finds nothing to add
    original = module._encode

    def _encode(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
        return original(_pad_to_hop(x, self.stride))

    module._encode = types.MethodType(_encode, module)


def ace_step_always_pads(module: torch.nn.Module) -> None:
    # AceStepTransformer1DModel pads the joined latents to a multiple of its patch only `if` the
    # length is not one, and cuts its output back to the length: padding both latents first
    # (the same zeros at the same end) and cutting the output again is that computation
    original = module.forward
    diffusers_module = sys.modules[type(module).__module__]

    def forward(self: torch.nn.Module, hidden_states: torch.Tensor, *args: object,
                context_latents: torch.Tensor, return_dict: bool = True, **kwargs: object) -> object:  # fmt: skip
        length = hidden_states.shape[1]
        pad = (self.patch_size - length % self.patch_size) % self.patch_size
        hidden_states = F.pad(hidden_states, (0, 0, 0, pad))
        context_latents = F.pad(context_latents, (0, 0, 0, pad))
        out = original(hidden_states, *args, context_latents=context_latents, return_dict=False,
                       **kwargs)[0][:, :length]  # fmt: skip
        if not return_dict:
            return (out,)
        return diffusers_module.Transformer2DModelOutput(sample=out)

    module.forward = types.MethodType(forward, module)
