"""Shared by the diffusers tests: build a class from its small config with every parameter
random, convert it with the CLI, and compare each graph with PyTorch at the sweep's two size
sets (``mobius.verification.diffusers_feeds.SIZE_SETS``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from mobius.cli import main
from mobius.diffusers.components import component_tasks
from mobius.diffusers.config import architecture
from mobius.diffusers.shared_modules import with_sibling_config
from mobius.testing.diffusers_configs import ALL_CONFIGS, randomize_scaled
from mobius.testing.diffusers_siblings import with_saved_sibling
from mobius.testing.diffusers_tiny import save_pretrained
from mobius.verification.diffusers_feeds import SIZE_SETS, feeds, torch_outputs

ATOL = 1e-4


def convert(label: str, root: Path) -> tuple[torch.nn.Module, Path]:
    """The model of config ``label`` (random parameters) and its converted directory."""
    import diffusers

    _, name, kwargs = next(c for c in ALL_CONFIGS if c[0] == label)
    model = randomize_scaled(getattr(diffusers, name)(**kwargs), 0).eval()
    save_pretrained(model, root / "model")  # tied parameters once
    model = with_saved_sibling(model, root / "model")  # a ControlNet on its transformer
    assert (
        main(["build", "--model", str(root / "model"), "--output", str(root / "onnx"), "-q"]) == 0
    )
    return model, root / "onnx"


def max_diffs(model: torch.nn.Module, out: Path) -> dict[str, float]:
    """The largest difference from PyTorch of each graph output at each size set, by
    ``graph:output@set``; every output's shape checked equal."""
    config = {"_class_name": type(model).__name__, **model.config}
    arch = architecture(with_sibling_config(config, out.parent / "model"))
    diffs = {}
    for task in component_tasks(type(model).__name__):
        if not task.supports(arch):  # a scale the bank does not hold: no graph
            continue
        folder = out / task.name if (out / task.name).is_dir() else out
        session = ort.InferenceSession(str(folder / "model.onnx"))
        names = [o.name for o in session.get_outputs()]
        for number, sizes in enumerate(SIZE_SETS, 1):
            inputs = feeds(task, arch, session, seed=number, run_sizes=sizes)
            with torch.no_grad():
                expected = [t.numpy() for t in torch_outputs(task, model, inputs)]
            got = session.run(None, {k: v.numpy() for k, v in inputs.items()})
            assert len(got) == len(expected)
            for name, e, g in zip(names, expected, got, strict=True):
                assert e.shape == g.shape, (name, e.shape, g.shape)
                if e.dtype == bool:  # a mask output: a flipped entry differs by 1
                    e, g = e.astype(np.int64), g.astype(np.int64)
                diffs[f"{task.name}:{name}@{number}"] = float(np.abs(e - g).max())
    return diffs
