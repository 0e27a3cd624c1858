import pytest
import torch

from tests.lowering.cases import case, run

torch.manual_seed(0)


def triangular(*batch: int, n: int = 8, upper: bool = False, unit: bool = False) -> torch.Tensor:
    """A well-conditioned triangular matrix: a strong diagonal (or ones) and small off-diagonals."""
    a = 0.3 * torch.randn(*batch, n, n)
    a = a.triu(1) if upper else a.tril(-1)
    diagonal = torch.ones(n) if unit else 1.5 + torch.rand(n)
    return a + torch.diag_embed(diagonal.expand(*batch, n))


def solve(upper: bool, left: bool, unit: bool):
    def fn(a, b):
        return torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit)

    return fn


DYN = [{0: "b"}, {0: "b"}]
CASES = [
    case(
        f"{'upper' if upper else 'lower'}_{'left' if left else 'right'}{'_unit' if unit else ''}",
        solve(upper, left, unit),
        [
            triangular(2, 3, upper=upper, unit=unit),
            torch.randn(2, 3, 8, 5) if left else torch.randn(2, 3, 5, 8),
        ],
        DYN,
        [
            triangular(4, 3, upper=upper, unit=unit),
            torch.randn(4, 3, 8, 5) if left else torch.randn(4, 3, 5, 8),
        ],
    )
    for upper in (False, True)
    for left in (True, False)
    for unit in (False, True)
]
# sizes that are not a power of two, and the 1x1 and 64x64 edges
CASES += [
    case(f"lower_unit_n{n}", solve(False, True, True), [triangular(2, n=n, unit=True), torch.randn(2, n, 3)], DYN,
         [triangular(3, n=n, unit=True), torch.randn(3, n, 3)])
    for n in (1, 2, 5, 64)
]  # fmt: skip


@pytest.mark.parametrize("fn,args,dynamic,other", CASES)
def test_solve_triangular(fn, args, dynamic, other):
    run(fn, args, dynamic, other, atol=1e-4)
