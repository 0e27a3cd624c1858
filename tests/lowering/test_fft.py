"""torch.fft through ONNX DFT (FNet's token mixing), against torch, with a dynamic length."""

import torch

from mobius.testing.lowering import check_lowering


class Fftn(torch.nn.Module):
    def forward(self, x):
        return torch.fft.fftn(x, dim=(1, 2)).real


class Spectra(torch.nn.Module):
    """Half spectrum, orthonormal scaling, an inverse: every scaling and onesided path."""

    def forward(self, x):
        half = torch.view_as_real(torch.fft.rfft(x, dim=-1, norm="ortho"))
        back = torch.fft.ifft(torch.fft.fft(x, dim=1), dim=1).real
        return half, back


def test_fftn_real_part_with_a_dynamic_sequence():
    check_lowering(
        Fftn(),
        [torch.randn(2, 5, 8)],
        [{0: "b", 1: "s"}],
        other_args=[torch.randn(3, 9, 8)],
        atol=1e-4,
    )


def test_rfft_ortho_and_inverse():
    check_lowering(Spectra(), [torch.randn(2, 6, 8)], atol=1e-4)
