"""Nodes per decoder layer: mobius vs torch.onnx.export(dynamo=True) on the same tiny Llama.

Run: python benchmarks/graph_quality.py [--model examples/tiny-llama]
Prints a table and writes benchmarks/results/graph_quality.json. Measures only.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import tempfile
from pathlib import Path

import onnx
import torch

import mobius


def layer_of(node: onnx.NodeProto) -> str:
    """Which decoder layer a node belongs to, from its scope metadata or its name."""
    text = " ".join([node.name] + [p.value for p in node.metadata_props])
    found = re.search(r"layers[._/](\d+)", text)
    return f"layer{found.group(1)}" if found else "model"


def histogram(path: Path) -> dict:
    model = onnx.load(str(path), load_external_data=False)
    per_layer = collections.Counter(layer_of(n) for n in model.graph.node)
    last = max(
        (k for k in per_layer if k.startswith("layer")), key=lambda k: int(k[5:]), default="model"
    )
    ops = collections.Counter(n.op_type for n in model.graph.node if layer_of(n) == last)
    return {
        "total_nodes": len(model.graph.node),
        "per_layer": dict(per_layer),
        "last_layer_ops": dict(ops),
    }


def torch_onnx(model_dir: Path, out: Path) -> dict:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = torch.ones(2, 7, dtype=torch.long)
    mask = torch.ones(2, 7, dtype=torch.long)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).logits

    program = torch.onnx.export(
        Logits(model), (ids, mask), dynamo=True,
        dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}),
    )  # fmt: skip
    program.save(str(out))
    return histogram(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="examples/tiny-llama")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = mobius.build(args.model).save(Path(tmp) / "mobius")
        results["mobius"] = histogram(out / "model.onnx")
        try:
            results["torch.onnx.export(dynamo=True)"] = torch_onnx(
                Path(args.model), Path(tmp) / "torch.onnx"
            )
        except Exception as exc:  # a peer that fails is recorded, not dropped
            results["torch.onnx.export(dynamo=True)"] = {
                "error": f"{type(exc).__name__}: {exc}"[:500]
            }
    for name, r in results.items():
        if "error" in r:
            print(f"{name:34s} failed: {r['error']}")
            continue
        last = max((k for k in r["per_layer"] if k.startswith("layer")), key=lambda k: int(k[5:]))
        print(
            f"{name:34s} total {r['total_nodes']:5d}  nodes in {last}: {r['per_layer'][last]:4d}  {r['last_layer_ops']}"
        )
    target = Path(__file__).parent / "results" / "graph_quality.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
