import pytest
import torch

from tests.lowering.cases import case, run

# the open interval, its edges, and values near ±1 where the tail polynomial takes over
INSIDE = torch.tensor([[-0.999, -0.9, -0.5, -1e-3, 0.0], [1e-3, 0.3, 0.7, 0.95, 0.9999]])
WIDE = torch.linspace(-0.99, 0.99, 41).reshape(1, 41)
CASES = [
    case("erfinv", torch.erfinv, [INSIDE], [{0: "b", 1: "n"}], [WIDE.expand(3, 41).clone()]),
    case(
        "erfinv_edges",
        torch.erfinv,
        [torch.tensor([[-1.0, 1.0, 0.5], [0.2, -1.0, 0.0]])],
        [{0: "b"}],
    ),
]


@pytest.mark.parametrize("fn,args,dynamic,other", CASES)
def test_special(fn, args, dynamic, other):
    run(fn, args, dynamic, other, atol=1e-5)
