"""Complex values, carried as real tensors with a trailing axis of 2 (lowering/complex_ops.py)."""

import pytest
import torch

from tests.lowering.cases import BS, case, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4, 8), randn(5, 7, 4, 8)  # [batch, seq, heads, head_dim]
Y, Y2 = randn(2, 3, 4, 8), randn(5, 7, 4, 8)
ANG, ANG2 = randn(2, 3, 4), randn(5, 7, 4)  # [batch, seq, head_dim / 2]


def c(x):
    """x's last axis as complex pairs."""
    return torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))


def r(z):
    """A complex tensor back to real, flattened like the models do."""
    return torch.view_as_real(z).flatten(-2)


def one(name, fn, x=(X, X2)):
    return case(name, fn, [x[0]], [BS], [x[1]])


def two(name, fn, x=(X, X2), y=(Y, Y2), dy=BS):
    return case(name, fn, [x[0], y[0]], [BS, dy], [x[1], y[1]])


def llama4_rope(x, angle):
    """Llama 4 / DeepSeek-V2 rotary embedding: complex product with polar(1, angle)."""
    freqs = torch.polar(torch.ones_like(angle), angle) * 1.0
    freqs = freqs.to(torch.complex64)[:, :].unsqueeze(2)
    return r(c(x) * freqs).type_as(x)


def deepseek_rope(x, angle):
    """The same with heads before sequence ([b, h, s, d]) and the cos/sin unsqueezed at 1."""
    freqs = torch.polar(torch.ones_like(angle), angle).unsqueeze(1)
    return r(c(x.transpose(1, 2)) * freqs).transpose(1, 2)


CASES = [
    two("llama4_rope", llama4_rope, y=(ANG, ANG2)),
    two("deepseek_rope", deepseek_rope, y=(ANG, ANG2)),
    one("roundtrip", lambda x: r(c(x))),
    two("mul_complex", lambda x, y: r(c(x) * c(y))),
    two("mul_real_tensor", lambda x, y: r(c(x) * y[..., :4])),
    two("mul_real_tensor_left", lambda x, y: r(y[..., :4] * c(x))),
    one("mul_python_complex", lambda x: r(c(x) * (0.5 - 2j))),
    two("div_complex", lambda x, y: r(c(x) / c(y + 3.0))),
    two("div_real", lambda x, y: r(c(x) / (y[..., :4].abs() + 1))),
    two("add_sub_alpha", lambda x, y: r(torch.add(c(x), c(y), alpha=2) - c(y))),
    two("add_real", lambda x, y: r(c(x) + y[..., :4])),
    one("neg_conj", lambda x: r(-c(x).conj().resolve_conj())),
    one("real_imag", lambda x: c(x).real * 2 + c(x).imag),
    two("complex_ctor", lambda x, y: r(torch.complex(x, y))),
    one("polar", lambda x: r(torch.polar(x.abs(), x))),
    one("reshape", lambda x: r(c(x).reshape(x.shape[0], -1, 2)).flatten(-2)),
    one("view_symbolic", lambda x: r(c(x).view(x.shape[0] * x.shape[1], 4, 4))),
    one("flatten", lambda x: r(c(x).flatten(1, 2)).flatten(1)),
    one("transpose", lambda x: r(c(x).transpose(0, -1))),
    one("permute", lambda x: r(c(x).permute(2, 0, -1, 1))),
    one("expand", lambda x: r(c(x)[:, :, :1].expand(-1, -1, 3, -1))),
    one("slice_select", lambda x: r(c(x)[:, 1:, -1])),
    one("narrow", lambda x: r(c(x).narrow(-1, 1, 2))),
    one("squeeze_unsqueeze", lambda x: r(c(x)[:, :, :1].squeeze(2).unsqueeze(-1))),
    one(
        "cat_stack",
        lambda x: r(
            torch.cat([c(x), c(x) * 2], -1) + torch.stack([c(x)] * 2, 2)[:, :, 0].repeat(1, 1, 1, 2)
        ),
    ),
    one(
        "chunk_unbind",
        lambda x: r(c(x).chunk(2, -1)[1] + c(x)[..., :2].unbind(-1)[0].unsqueeze(-1)),
    ),
    one("clone_contiguous", lambda x: r(c(x).transpose(1, 2).contiguous().clone())),
    one("to_complex128", lambda x: r(c(x).to(torch.complex128)).float()),
]


@pytest.mark.parametrize("fn,args,dynamic,other", CASES)
def test_complex(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


def test_unlowered_complex_op_is_named():
    from mobius.errors import UnsupportedError
    from mobius.testing.lowering import lower_module
    from tests.lowering.cases import Fn

    with pytest.raises(UnsupportedError, match=r"aten\.exp\.default:complex"):
        lower_module(Fn(lambda x: r(c(x).exp())), [X], [BS])
