"""What patterns exchange with the driver: regions of the traced graph, claims and declines."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

aten = torch.ops.aten

# The traced model is the HF model wrapped as attribute ``m`` (mobius.synth.trace): its module
# paths and state-dict names start with this prefix, which reports and names leave out.
WRAPPER_PREFIX = "m."


def module_of(node: torch.fx.Node) -> tuple[str, str]:
    """The innermost HF module (path, class name) that produced ``node``; ('', '') at top level."""
    stack = node.meta.get("nn_module_stack") or {}
    for path, cls in reversed(list(stack.values())):
        if isinstance(path, str) and path.startswith(WRAPPER_PREFIX):
            name = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
            return path[len(WRAPPER_PREFIX) :], name
    return "", ""


@dataclass(frozen=True)
class MatchContext:
    """What patterns may consult beyond the graph: the HF config and the task's kind.

    The config informs checks (is there a sliding window?), it never stands in for them.
    """

    hf_config: Any = None
    causal: bool = False  # the task is a causal LM: attention is causal over the padding mask
    padding_mask: str | None = None  # the graph input (placeholder name) holding attention_mask


@dataclass
class Region:
    """The call_function nodes whose innermost module is one module instance, in graph order."""

    path: str
    cls: str
    nodes: list[torch.fx.Node]


@dataclass
class Claim:
    """A pattern's promise: ``nodes`` are replaced by what ``emit`` returns for ``anchor``."""

    pattern: str
    component: str
    module: str
    nodes: set[torch.fx.Node]
    anchor: torch.fx.Node
    emit: Callable[[Any], Any]  # (LoweringContext) -> value of the anchor
    attributes: dict[str, Any] = field(default_factory=dict)

    def check_closed(self) -> str | None:
        """A claim may only hide nodes nobody outside it uses; returns why not, or None."""
        for node in self.nodes:
            if node is self.anchor:
                continue
            outside = [u for u in node.users if u not in self.nodes]
            if outside:
                return f"{node.name} is also used by {outside[0].name} outside the matched subgraph"
        return None


@dataclass
class Decline:
    """A pattern looked at a region and left it to lowering, for a reason."""

    pattern: str
    module: str
    reason: str


def is_op(node: Any, *targets: Any) -> bool:
    """``node`` is an FX call of one of ``targets`` (overloads or overload packets)."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    packet = getattr(node.target, "overloadpacket", None)
    return node.target in targets or packet in targets


CASTS = (aten.to, aten._to_copy, aten.type_as)
NO_OPS = (aten._assert_tensor_metadata,)


def skip_casts(node: Any) -> Any:
    """Follow dtype casts back to the value they cast."""
    while is_op(node, *CASTS):
        node = node.args[0]
    return node


def only_user(node: torch.fx.Node) -> torch.fx.Node | None:
    """The single real (non-assert) user of ``node``, or None."""
    users = [u for u in node.users if not is_op(u, *NO_OPS)]
    return users[0] if len(users) == 1 else None


def asserts_on(nodes: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """The metadata-assert nodes that only look at ``nodes`` (claimed along with them)."""
    return {u for n in nodes for u in n.users if is_op(u, *NO_OPS)}


def placeholder_users(node: Any) -> int:
    """How many real ops read ``node`` if it is a graph input or parameter (else 0)."""
    if not isinstance(node, torch.fx.Node) or node.op != "placeholder":
        return 0
    return len([u for u in node.users if not is_op(u, *NO_OPS)])
