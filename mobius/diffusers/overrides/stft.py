"""Audio front ends: the short-time Fourier transform as a strided convolution with the
windowed DFT basis.

``torch.stft`` returns a complex tensor (an FFT), which ONNX graphs of real tensors do not
carry. With ``center=False`` each output frame ``t`` and bin ``k`` is
``sum_n x[t * hop + n] * window[n] * exp(-2 pi i k n / n_fft)``: a ``Conv1d`` of stride ``hop``
whose kernels are ``window * cos`` (the real part) and ``-window * sin`` (the imaginary part),
for the ``n_fft // 2 + 1`` one-sided bins. The basis is built in float64 from ``k * n mod
n_fft`` (exact angles) and used in float32, as the FFT's own twiddle factors are.
"""

from __future__ import annotations

import math
import types

import torch
import torch.nn.functional as F


def windowed_dft(
    waveform: torch.Tensor, n_fft: int, hop: int, window: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The real and imaginary parts of ``torch.stft(waveform, n_fft, hop, window=window,
    center=False, onesided=True)``, each ``[batch, n_fft // 2 + 1, frames]``."""
    bins = n_fft // 2 + 1
    k = torch.arange(bins, dtype=torch.float64, device=waveform.device)
    n = torch.arange(n_fft, dtype=torch.float64, device=waveform.device)
    angle = 2 * math.pi * torch.remainder(k[:, None] * n[None, :], n_fft) / n_fft
    win = window.to(torch.float64)
    basis = torch.cat([angle.cos() * win, -angle.sin() * win]).to(waveform.dtype)
    spectrum = F.conv1d(waveform.unsqueeze(1), basis.unsqueeze(1), stride=hop)
    return spectrum[:, :bins], spectrum[:, bins:]


def cosmos3_spectrogram_by_convolution(module: torch.nn.Module) -> None:
    # Cosmos3AudioSpectrogramConvNeXtEncoder: its forward with the STFT's real and imaginary
    # parts from ``windowed_dft`` (diffusers stacks them on channels, real first)
    def forward(self: torch.nn.Module, audio: torch.Tensor) -> torch.Tensor:
        batch_size, num_channels, num_samples = audio.shape
        if num_channels > 1:
            audio = audio.reshape(batch_size * num_channels, 1, num_samples)
        pad_left = (self.n_fft - self.hop_length) // 2
        pad_right = (self.n_fft - self.hop_length) - pad_left
        waveform = F.pad(audio.squeeze(1), (pad_left, pad_right)).float()
        window = torch.hann_window(self.n_fft, device=waveform.device, dtype=waveform.dtype)
        real, imaginary = windowed_dft(waveform, self.n_fft, self.hop_length, window)
        spectrogram = torch.cat([real, imaginary], dim=1).to(audio.dtype)
        if num_channels > 1:
            spectrogram = spectrogram.reshape(
                batch_size, num_channels * spectrogram.shape[1], spectrogram.shape[2]
            )
        return self.layers(spectrogram).transpose(1, 2)

    module.forward = types.MethodType(forward, module)


def mmaudio_mel_by_convolution(module: torch.nn.Module) -> None:
    # MMAudioMelSpectrogram: the log-mel of the STFT's magnitude, the STFT from ``windowed_dft``
    def forward(self: torch.nn.Module, waveform: torch.Tensor) -> torch.Tensor:
        waveform = waveform.clamp(min=-1.0, max=1.0)
        padding = (self.n_fft - self.hop_length) // 2
        waveform = F.pad(waveform.unsqueeze(1), (padding, padding), mode="reflect").squeeze(1)
        real, imaginary = windowed_dft(waveform, self.n_fft, self.hop_length, self.hann_window)
        magnitude = torch.sqrt(real.pow(2) + imaginary.pow(2) + 1e-9).float()
        return torch.log(torch.clamp(torch.matmul(self.mel_basis, magnitude), min=1e-5))

    module.forward = types.MethodType(forward, module)
