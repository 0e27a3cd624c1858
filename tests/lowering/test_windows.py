import pytest
import torch

from tests.lowering.cases import case, run

torch.manual_seed(0)
X, X2 = torch.randn(2, 9, 3), torch.randn(3, 12, 3)
CASES = [
    case("unfold_seq", lambda x: x.unfold(1, 4, 2), [X], [{0: "b", 1: "s"}], [X2]),
    case("unfold_step1", lambda x: x.unfold(1, 3, 1), [X], [{0: "b", 1: "s"}], [X2]),
    case("unfold_last_axis", lambda x: x.unfold(-1, 2, 1), [X], [{0: "b", 1: "s"}], [X2]),
    case("unfold_first_axis", lambda x: x.unfold(0, 2, 1), [X], [{1: "s"}], [torch.randn(2, 5, 3)]),
]


@pytest.mark.parametrize("fn,args,dynamic,other", CASES)
def test_unfold(fn, args, dynamic, other):
    run(fn, args, dynamic, other)
