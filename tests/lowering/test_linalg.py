import pytest
import torch

from tests.lowering.cases import BS, case, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
M, M2 = randn(3, 4), randn(7, 4)
S = {0: "s"}


def one(name, fn, x=(X, X2), dyn=BS, marks=()):
    return case(name, fn, [x[0]], [dyn], [x[1]], marks=marks)


class Linear(torch.nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 5, bias=bias)

    def forward(self, x):
        return self.proj(x)


class AddMM(torch.nn.Module):
    def __init__(self, kind: str, alpha: float = 1.0, beta: float = 1.0) -> None:
        super().__init__()
        self.kind, self.alpha, self.beta = kind, alpha, beta
        self.w = torch.nn.Parameter(torch.randn(4, 5))
        self.b = torch.nn.Parameter(torch.randn(5))

    def forward(self, x):
        if self.kind == "addmm":
            return torch.addmm(self.b, x, self.w, beta=self.beta, alpha=self.alpha)
        w = self.w.expand(x.shape[0], 4, 5)
        if self.kind == "baddbmm":
            return torch.baddbmm(self.b, x, w, beta=self.beta, alpha=self.alpha)
        return torch.addbmm(self.b, x, w, beta=self.beta, alpha=self.alpha)


MATMUL = [
    one("linear", Linear(True)),
    one("linear_no_bias", Linear(False)),
    one("matmul_3d", lambda x: x @ x.transpose(1, 2)),
    one("matmul_broadcast", lambda x: torch.matmul(x, torch.ones(4, 2))),
    one("matmul_vector", lambda x: torch.matmul(x, torch.arange(4.0))),
    one("mm", lambda m: torch.mm(m, m.t()), (M, M2), S),
    one("bmm", lambda x: torch.bmm(x, x.transpose(1, 2))),
    one("addmm", AddMM("addmm"), (M, M2), S),
    one("addmm_alpha_beta", AddMM("addmm", alpha=0.5, beta=2.0), (M, M2), S),
    one("addmm_beta_zero", AddMM("addmm", beta=0.0), (M, M2), S),
    one("baddbmm", AddMM("baddbmm", alpha=2.0, beta=0.5), dyn={0: "b"}, x=(X, randn(5, 3, 4))),
    one("addbmm", AddMM("addbmm"), dyn={0: "b"}, x=(X, randn(5, 3, 4))),
    one("einsum", lambda x: torch.einsum("bsd,btd->bst", x, x)),
    one("einsum_spaces", lambda x: torch.einsum("b s d, d -> b s", x, torch.arange(4.0))),
    one("outer", lambda m: torch.outer(m[:, 0], m[0]), (M, M2), S),
    # float32 x float64 promotes (diffusers' sin-cos position tables)
    one("outer_promotes", lambda m: torch.outer(m[:, 0], m[0].double()), (M, M2), S),
]


def conv(name, module, shape, shape2, dyn, marks=()):
    return case(name, module, [randn(*shape)], [dyn], [randn(*shape2)], marks=marks)


HW = {0: "b", 2: "h", 3: "w"}
CONV = [
    conv("conv2d", torch.nn.Conv2d(3, 4, 3, padding=1), (2, 3, 5, 6), (3, 3, 8, 7), HW),
    conv(
        "conv2d_stride_no_bias",
        torch.nn.Conv2d(3, 4, 3, stride=2, bias=False),
        (2, 3, 5, 6),
        (3, 3, 9, 7),
        HW,
    ),
    conv(
        "conv2d_dilation_groups",
        torch.nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2),
        (2, 4, 6, 6),
        (3, 4, 9, 7),
        HW,
    ),
    conv(
        "conv2d_asymmetric",
        torch.nn.Conv2d(3, 2, (3, 1), stride=(1, 2), padding=(1, 0)),
        (2, 3, 5, 6),
        (3, 3, 8, 9),
        HW,
    ),
    conv("conv2d_same", torch.nn.Conv2d(3, 4, 4, padding="same"), (2, 3, 5, 6), (3, 3, 8, 7), HW),
    conv("conv2d_valid", torch.nn.Conv2d(3, 4, 3, padding="valid"), (2, 3, 5, 6), (3, 3, 8, 7), HW),
    conv("conv1d", torch.nn.Conv1d(3, 4, 3, padding=1), (2, 3, 5), (3, 3, 9), {0: "b", 2: "t"}),
    conv(
        "conv1d_same_depthwise",
        torch.nn.Conv1d(4, 4, 3, padding="same", groups=4),
        (2, 4, 5),
        (3, 4, 9),
        {0: "b", 2: "t"},
    ),
    conv(
        "conv3d",
        torch.nn.Conv3d(2, 3, 3, padding=1),
        (2, 2, 4, 5, 3),
        (3, 2, 3, 6, 4),
        {0: "b", 2: "d", 3: "h", 4: "w"},
    ),
    conv(
        "conv_transpose2d",  # stride, padding, output padding and groups
        torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
        (2, 4, 5, 6),
        (3, 4, 3, 7),
        HW,
    ),
    conv(
        "conv_transpose3d",  # Cosmos's inverse Haar step along one axis
        torch.nn.ConvTranspose3d(2, 2, (1, 1, 2), stride=(1, 1, 2), groups=2, bias=False),
        (2, 2, 3, 4, 5),
        (1, 2, 2, 3, 6),
        {0: "b", 2: "d", 3: "h", 4: "w"},
    ),
    one(
        "convolution",
        lambda x: torch.ops.aten.convolution(
            x, torch.ones(2, 3, 2), None, [1], [1], [1], False, [0], 1
        ),
        (randn(2, 3, 5), randn(3, 3, 8)),
        {0: "b", 2: "t"},
    ),
]


@pytest.mark.parametrize("fn,args,dynamic,other", MATMUL + CONV)
def test_linalg(fn, args, dynamic, other):
    run(fn, args, dynamic, other, atol=1e-4)
