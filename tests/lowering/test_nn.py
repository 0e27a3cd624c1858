import pytest
import torch
import torch.nn.functional as F

from tests.lowering.cases import BS, case, randint, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
Q, Q2 = randn(2, 4, 3, 8), randn(3, 4, 6, 8)
K, K2 = randn(2, 4, 5, 8), randn(3, 4, 9, 8)
KV, KV2 = randn(2, 2, 5, 8), randn(3, 2, 9, 8)  # two kv heads for four query heads
BHS = {0: "b", 2: "s"}
BHT = {0: "b", 2: "t"}


def one(name, fn, x=(X, X2), dyn=BS, marks=()):
    return case(name, fn, [x[0]], [dyn], [x[1]], marks=marks)


class Norm(torch.nn.Module):
    def __init__(self, norm: torch.nn.Module) -> None:
        super().__init__()
        self.norm = norm
        for p in norm.parameters():  # not the trivial ones/zeros init
            torch.nn.init.normal_(p)

    def forward(self, x):
        return self.norm(x)


class WeightNormConv(torch.nn.Module):
    """A convolution whose weight is ``g * v / ||v||`` (torch's weight_norm parametrization)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        conv = torch.nn.Conv1d(4, 4, 3, padding=1)
        self.conv = torch.nn.utils.parametrizations.weight_norm(conv, dim=dim)
        for p in self.parameters():
            torch.nn.init.normal_(p)

    def forward(self, x):
        return self.conv(x)


class BatchNorm(torch.nn.Module):
    """Eval-mode batch norm with random running statistics (and affine terms, unless disabled)."""

    def __init__(self, affine: bool = True) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm2d(4, eps=1e-3, affine=affine).eval()
        for p in self.norm.parameters():
            torch.nn.init.normal_(p)
        self.norm.running_mean.normal_()
        self.norm.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.norm(x)


NORM = [
    one("batch_norm", BatchNorm(), dyn={0: "b", 2: "h"}, x=(randn(2, 4, 3, 5), randn(3, 4, 6, 5))),
    one(
        "native_batch_norm_no_training",
        lambda x: torch.ops.aten._native_batch_norm_legit_no_training(
            x,
            torch.full((4,), 1.5),
            torch.full((4,), 0.25),
            torch.arange(4.0),
            torch.ones(4) * 2,
            0.1,
            1e-3,
        )[0],
        dyn={0: "b", 2: "h"},
        x=(randn(2, 4, 3, 5), randn(3, 4, 6, 5)),
    ),
    one(
        "batch_norm_no_affine",
        BatchNorm(affine=False),
        dyn={0: "b", 2: "h"},
        x=(randn(2, 4, 3, 5), randn(3, 4, 6, 5)),
    ),
    one(
        "batch_norm_batch_statistics",  # BiT's weight standardisation: no running statistics
        lambda x: F.batch_norm(
            x, None, None, torch.full((4,), 1.5), torch.full((4,), 0.25), training=True, eps=1e-3
        ),
        dyn={0: "b", 2: "h"},
        x=(randn(2, 4, 3, 5), randn(3, 4, 6, 5)),
    ),
    one(
        "weight_norm_dim2",
        WeightNormConv(2),
        dyn={0: "b", 2: "t"},
        x=(randn(2, 4, 5), randn(3, 4, 7)),
    ),
    one(
        "weight_norm_dim0",
        WeightNormConv(0),
        dyn={0: "b", 2: "t"},
        x=(randn(2, 4, 5), randn(3, 4, 7)),
    ),
    one(
        "weight_norm_all",
        WeightNormConv(None),
        dyn={0: "b", 2: "t"},
        x=(randn(2, 4, 5), randn(3, 4, 7)),
    ),
    one("layer_norm", Norm(torch.nn.LayerNorm(4))),
    one("layer_norm_no_affine", lambda x: F.layer_norm(x, (4,), eps=1e-3)),
    one("layer_norm_no_bias", Norm(torch.nn.LayerNorm(4, bias=False))),
    one(
        "layer_norm_two_axes", Norm(torch.nn.LayerNorm((3, 4))), dyn={0: "b"}, x=(X, randn(5, 3, 4))
    ),
    one(
        "native_layer_norm",
        lambda x: torch.ops.aten.native_layer_norm(x, [4], torch.ones(4), torch.zeros(4), 1e-5),
    ),
    one(
        "native_layer_norm_no_weight",
        lambda x: torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)[0],
    ),
    one("rms_norm", Norm(torch.nn.RMSNorm(4, eps=1e-6))),
    one("rms_norm_default_eps", lambda x: F.rms_norm(x, (4,))),
    one(
        "group_norm",
        Norm(torch.nn.GroupNorm(2, 4)),
        dyn={0: "b", 2: "h"},
        x=(randn(2, 4, 3, 5), randn(3, 4, 6, 5)),
    ),
    one(
        "group_norm_no_affine",
        lambda x: F.group_norm(x, 1, eps=1e-3),
        dyn={0: "b", 2: "t"},
        x=(randn(2, 4, 3), randn(3, 4, 6)),
    ),
]


EMBED = [
    case(
        "embedding", torch.nn.Embedding(10, 4), [randint(0, 10, 2, 3)], [BS], [randint(0, 10, 5, 7)]
    ),
    case(
        "embedding_functional",
        lambda i, w: F.embedding(i, w),
        [randint(0, 6, 2, 3), randn(6, 4)],
        [BS, {}],
        [randint(0, 6, 5, 7), randn(6, 4)],
    ),
    case(
        "embedding_padding_idx",
        torch.nn.Embedding(10, 4, padding_idx=0),
        [randint(0, 10, 4)],
        [{0: "s"}],
        [randint(0, 10, 9)],
    ),
]


def mask_with_empty_row(b, s, t):
    mask = torch.rand(b, 1, s, t) > 0.3
    mask[:, :, 0] = False  # the first query sees nothing
    return mask


def attn(name, fn, extra=(), extra2=(), extra_dyn=(), marks=()):
    return case(
        name, fn, [Q, K, K, *extra], [BHS, BHT, BHT, *extra_dyn], [Q2, K2, K2, *extra2], marks=marks
    )


M, M2 = torch.rand(2, 1, 3, 5) > 0.3, torch.rand(3, 1, 6, 9) > 0.3
FM, FM2 = randn(2, 1, 3, 5), randn(3, 1, 6, 9)
MASK_DYN = [{0: "b", 2: "s", 3: "t"}]

ATTENTION = [
    attn("sdpa", F.scaled_dot_product_attention),
    attn("sdpa_scale", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3)),
    attn(
        "sdpa_bool_mask",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        [M],
        [M2],
        MASK_DYN,
    ),
    attn(
        "sdpa_float_mask",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        [FM],
        [FM2],
        MASK_DYN,
    ),
    attn(
        "sdpa_fully_masked_row",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        [mask_with_empty_row(2, 3, 5)],
        [mask_with_empty_row(3, 6, 9)],
        MASK_DYN,
    ),
    case(
        "sdpa_causal",
        lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True),
        [Q],
        [BHS],
        [Q2],
    ),
    attn(
        "sdpa_causal_longer_keys",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    case(
        "sdpa_gqa",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
        [Q, KV, KV * 2],
        [BHS, BHT, BHT],
        [Q2, KV2, KV2 * 2],
    ),
    case(
        "sdpa_gqa_causal_mask",
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
        [Q, KV, KV * 2, M],
        [BHS, BHT, BHT, *MASK_DYN],
        [Q2, KV2, KV2 * 2, M2],
    ),
]


PAD = [
    one("pad", lambda x: F.pad(x, (1, 2))),
    one("pad_value_two_dims", lambda x: F.pad(x, (1, 0, 2, 1), value=-3.0)),
    one("pad_negative", lambda x: F.pad(x, (-1, 1))),
    one(
        "pad_int",
        lambda a: F.pad(a, (0, 3), value=7),
        (randint(0, 5, 2, 3, 4), randint(0, 5, 5, 7, 4)),
    ),
    one("pad_reflect", lambda x: F.pad(x, (2, 1), mode="reflect")),
    one("pad_replicate", lambda x: F.pad(x, (2, 1), mode="replicate")),
    one("pad_circular", lambda x: F.pad(x, (2, 1), mode="circular")),
    one("constant_pad_nd", lambda x: torch.ops.aten.constant_pad_nd(x, [1, 1, 0, 2], 0.5)),
]


@pytest.mark.parametrize("fn,args,dynamic,other", NORM + EMBED + ATTENTION + PAD)
def test_nn(fn, args, dynamic, other):
    run(fn, args, dynamic, other, atol=1e-4)
