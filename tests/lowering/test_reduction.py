import pytest
import torch
import torch.nn.functional as F

from tests.lowering.cases import BS, case, randint, randn, run

torch.manual_seed(0)
X, X2 = randn(2, 3, 4), randn(5, 7, 4)
A, A2 = randint(-9, 10, 2, 3, 4), randint(-9, 10, 5, 7, 4)
B = (X > 0.5, X2 > 0.5)
H, H2 = randn(2, 3, 4) * 0.5, randn(5, 7, 4) * 0.5  # fractional values: any/all must not truncate


def one(name, fn, x=(X, X2), marks=()):
    return case(name, fn, [x[0]], [BS], [x[1]], marks=marks)


REDUCE = [
    one("mean_all", torch.mean),
    one("mean_dim", lambda x: x.mean(-1)),
    one("mean_dims_keepdim", lambda x: x.mean((0, 2), keepdim=True)),
    one("sum_all", torch.sum),
    one("sum_dim", lambda x: x.sum(1)),
    one("sum_keepdim", lambda x: x.sum(-1, keepdim=True)),
    one("sum_int", lambda a: a.sum(1), (A, A2)),
    one("sum_bool", lambda b: b.sum(-1), B),
    one("sum_dtype", lambda a: a.sum(dtype=torch.float32), (A, A2)),
    one("prod", lambda x: x.prod()),
    one("prod_dim", lambda x: x.prod(-1, keepdim=True)),
    one("prod_int", lambda a: a.prod(1), (A, A2)),
    one("amax", lambda x: x.amax(-1)),
    one("amax_dims", lambda x: x.amax((0, 1), keepdim=True)),
    one("amin", lambda x: x.amin(1)),
    one("amin_int", lambda a: a.amin(-1), (A, A2)),
    one("logsumexp", lambda x: x.logsumexp(-1)),
    one("logsumexp_keepdim", lambda x: torch.logsumexp(x, (1, 2), keepdim=True)),
]


ANY_ALL_MAX = [
    one("any_dim", lambda b: b.any(-1), B),
    one("any_all", lambda b: b.any(), B),
    one("all_dim", lambda b: b.all(1), B),
    one("any_float", lambda h: h.any(-1), (H, H2)),
    one("all_float", lambda h: h.all(-1), (H, H2)),
    one("all_int_keepdim", lambda a: a.all(-1, keepdim=True), (A, A2)),
    one("max_all", torch.max),
    one("min_all", lambda a: a.min(), (A, A2)),
    one("max_dim", lambda x: x.max(-1)),
    one("max_dim_keepdim", lambda x: x.max(1, keepdim=True)),
    one("min_dim", lambda x: x.min(0)),
    one("max_binary", lambda x: torch.max(x, x.flip(1))),
    one("min_binary", lambda x: torch.min(x, x.flip(1))),
    one("argmax", lambda x: x.argmax(-1)),
    one("argmax_keepdim", lambda x: x.argmax(1, keepdim=True)),
    one("argmax_flat", lambda x: x.argmax()),
    one("argmin", lambda x: x.argmin(0)),
]


SOFTMAX_SCAN = [
    one("softmax", lambda x: F.softmax(x, -1)),
    one("softmax_dim1", lambda x: F.softmax(x, 1)),
    one("softmax_int_to_float", lambda a: F.softmax(a, -1, dtype=torch.float32), (A, A2)),
    one("_softmax", lambda x: torch.ops.aten._softmax(x, -1, False)),
    one("log_softmax", lambda x: F.log_softmax(x, -1)),
    one("_log_softmax", lambda x: torch.ops.aten._log_softmax(x, 1, False)),
    one("safe_softmax", lambda x: torch.ops.aten._safe_softmax(x, -1)),
    one(
        "safe_softmax_masked_row",
        lambda x: torch.ops.aten._safe_softmax(x.masked_fill(x[..., :1] > 0, float("-inf")), -1),
    ),
    one("cumsum", lambda x: x.cumsum(1)),
    one("cumsum_negative_dim", lambda x: torch.cumsum(x, -1)),
    one("cumsum_int", lambda a: a.cumsum(-1), (A, A2)),
    one("cumsum_bool", lambda b: b.cumsum(1), B),
    one("topk", lambda x: x.topk(2)),
    one("topk_dim_smallest", lambda x: torch.topk(x, 2, dim=1, largest=False)),
    one("topk_symbolic_k", lambda x: x.topk(x.shape[1] - 1, dim=1)),
    one("sort", lambda x: x.sort(-1)),
    one("sort_descending", lambda x: x.sort(1, descending=True)),
    # bools, which TopK does not order: as int64, the values back to bool
    one("sort_bool", lambda b: b.sort(dim=-1, descending=True, stable=True), B),
]


STATS = [
    one("var", lambda x: x.var(-1)),
    one("var_all", lambda x: x.var()),
    one("var_unbiased_false", lambda x: x.var(1, unbiased=False)),
    one("var_correction_keepdim", lambda x: torch.var(x, (0, 2), correction=0, keepdim=True)),
    one("var_mean", lambda x: torch.var_mean(x, -1)),
    one("var_mean_keepdim", lambda x: torch.var_mean(x, 1, keepdim=True, correction=0)),
    one("var_mean_all", lambda x: torch.var_mean(x)),
    one("std", lambda x: x.std(-1)),
    one("std_all", lambda x: x.std()),
    one("std_unbiased_false_keepdim", lambda x: x.std(-1, False, True)),
    one("var_default_unbiased_false", lambda x: torch.ops.aten.var.default(x, False)),
    one("norm", lambda x: x.norm(dim=-1)),
    one("norm_all", lambda x: x.norm()),
    one("vector_norm_l1", lambda x: torch.linalg.vector_norm(x, 1, dim=-1, keepdim=True)),
    one("aten_norm", lambda x: torch.ops.aten.norm(x, 2, [1])),
    one("normalize", lambda x: F.normalize(x, dim=-1)),
]


@pytest.mark.parametrize("fn,args,dynamic,other", REDUCE + ANY_ALL_MAX + SOFTMAX_SCAN + STATS)
def test_reduction(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


EDGES = torch.tensor([-0.5, 0.0, 0.5, 1.0])
SEARCH = [
    one("argsort", lambda x: x.argsort(-1)),
    one("argsort_descending_dim", lambda x: torch.argsort(x, dim=1, descending=True)),
    # many ties: the stable order (valid tokens first, each group in its order)
    one("argsort_bool_stable", lambda b: torch.argsort(b, dim=-1, descending=True, stable=True), B),
    one("bucketize", lambda x: torch.bucketize(x, EDGES)),
    one("bucketize_right_int32", lambda x: torch.bucketize(x, EDGES, right=True, out_int32=True)),
    # boundaries hit exactly: right decides which bucket
    one("bucketize_on_edges", lambda x: torch.bucketize(x.round() / 2, EDGES, right=True)),
]


@pytest.mark.parametrize("fn,args,dynamic,other", SEARCH)
def test_search(fn, args, dynamic, other):
    run(fn, args, dynamic, other)


NORMS = [
    one("linalg_norm_last_axis", lambda x: torch.linalg.norm(x, dim=-1)),
    one("linalg_norm_all", lambda x: torch.linalg.norm(x)),
    one("linalg_norm_order_1_keepdim", lambda x: torch.linalg.norm(x, 1, dim=1, keepdim=True)),
    one("linalg_norm_frobenius", lambda x: torch.linalg.norm(x, "fro", dim=(0, 2))),
    # a matrix norm the lowering declines is decomposed by torch's table, as before
    case("linalg_norm_matrix_inf", lambda x: torch.linalg.norm(x, float("inf"), dim=(1, 2)), [X]),
]


@pytest.mark.parametrize("fn,args,dynamic,other", NORMS)
def test_linalg_norm(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
