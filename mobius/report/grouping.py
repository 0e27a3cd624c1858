"""The module tree with repeated layers collapsed: ``layers.0–31: LlamaDecoderLayer``.

Siblings are merged when their whole subtrees give identical results (same classes, statuses,
components with the same attributes apart from the layer index, same op histograms, same
declines) and their names differ only in an index. Containers that only hold numbered children
(``ModuleList``) are folded into their children's names, so ``layers`` + ``0`` reads ``layers.0``.
Leaf siblings with identical results (``k_proj``, ``v_proj``) share one line too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mobius.report.model import ModuleReport
from mobius.report.paths import ranges

# Python arithmetic on symbolic sizes: traced once where a size is first needed, so it differs
# between otherwise identical layers and is left out of the comparison.
SYMBOLIC = ("_operator.", "builtins.", "math.", "torch.sym_")
CONTAINERS = {"ModuleList", "ModuleDict", "Sequential"}
_NUMBERED = re.compile(r"^(.*\.)?(\d+)$")  # "7" or "layers.7", not "ln_1"


@dataclass
class TreeNode:
    """A module with its children, ``name`` relative to the parent (``layers.0`` once folded)."""

    name: str
    module: ModuleReport
    children: list[TreeNode] = field(default_factory=list)


@dataclass
class Group:
    """Sibling subtrees with identical results, shown once; ``members[0]`` stands for them all."""

    label: str
    members: list[TreeNode]
    children: list[Group] = field(default_factory=list)
    indexed: bool = False  # members differ by index (layers.0–31), not by name (k_proj, v_proj)

    @property
    def module(self) -> ModuleReport:
        return self.members[0].module

    @property
    def paths(self) -> list[str]:
        return [m.module.path for m in self.members]


def build_tree(modules: list[ModuleReport]) -> TreeNode:
    """Nest modules by path (the root is the module with path ``""``)."""
    by_path = {m.path: TreeNode(m.path, m) for m in modules}
    root = by_path.get("") or TreeNode("", ModuleReport("", "<model>", "empty"))
    by_path[""] = root
    for path, node in by_path.items():
        if not path:
            continue
        parent = path.rpartition(".")[0]
        while parent not in by_path:
            parent = parent.rpartition(".")[0]
        node.name = path[len(parent) + 1 :] if parent else path
        by_path[parent].children.append(node)
    _fold(root)
    return root


def _fold(node: TreeNode) -> None:
    """Splice plain containers of numbered children into their parent."""
    out: list[TreeNode] = []
    for child in node.children:
        _fold(child)
        m = child.module
        plain = m.cls in CONTAINERS and m.status == "empty" and not m.declines
        if plain and child.children and all(c.name.isdigit() for c in child.children):
            for grandchild in child.children:
                grandchild.name = f"{child.name}.{grandchild.name}"
                out.append(grandchild)
        else:
            out.append(child)
    node.children = out


def signature(node: TreeNode) -> tuple:
    """What must be equal for two subtrees to share a line; names of numbered children included."""
    m = node.module
    components = tuple(
        (
            c.pattern,
            c.component,
            tuple(sorted((k, repr(v)) for k, v in c.attributes.items() if k != "layer")),
        )
        for c in m.components
    )
    own = (
        m.cls,
        m.status,
        components,
        tuple((op, n) for op, n in m.lowered_ops.items() if not op.startswith(SYMBOLIC)),
        tuple(m.blocked_ops.items()),
        tuple((d.pattern, d.reason) for d in m.declines),
    )
    return own + (tuple((c.name, signature(c)) for c in node.children),)


def group(node: TreeNode) -> Group:
    """The grouped view of ``node``'s subtree."""
    top = Group(node.name, [node])
    top.children = group_children(node.children)
    return top


def group_children(children: list[TreeNode]) -> list[Group]:
    buckets: dict[tuple, list[TreeNode]] = {}
    for child in children:
        numbered = _NUMBERED.match(child.name)
        if numbered:
            key: tuple = ("index", numbered.group(1) or "", signature(child))
        elif not child.children:
            key = ("leaf", signature(child))
        else:
            key = ("name", child.name)
        buckets.setdefault(key, []).append(child)
    groups: list[Group] = []
    for key, members in buckets.items():
        if key[0] == "index":
            indices = [int(_NUMBERED.match(m.name).group(2)) for m in members]
            label = f"{key[1]}{ranges(indices)}"
        else:
            label = ", ".join(m.name for m in members)
        one = Group(label, members, indexed=key[0] == "index")
        one.children = group_children(members[0].children)
        groups.append(one)
    return groups
