"""Every single-graph task of CONTRACTS.md on one representative tiny random model.

Each checkpoint is saved with its head class, converted by the CLI without ``--task`` (so the task
comes from ``architectures``), and compared with PyTorch by the contract's names: batch 2 with
padding, atol 1e-4 on the real positions.
"""

from __future__ import annotations

import json

import pytest

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.sources.config import from_hf
from mobius.tasks import HeadTask
from mobius.tasks.detect import detect_task, get_task
from mobius.testing.parity import contract_diffs
from mobius.testing.tiny import make_checkpoint, tiny_config

ATOL = 1e-4
TEXT = ["input_ids", "attention_mask", "token_type_ids"]
AUDIO = ["input_values", "attention_mask"]
LOGITS = ["logits"]

# (task, model type, graph inputs, graph outputs, whether mobius.json has id2label)
CASES = [
    ("fill-mask", "bert", TEXT, LOGITS, False),
    # rotary positions made inside an encoder (batch-1 tables, broadcast)
    ("fill-mask", "eurobert", TEXT[:2], LOGITS, False),
    ("text-classification", "roberta", TEXT, LOGITS, True),
    ("token-classification", "bert", TEXT, LOGITS, True),
    ("question-answering", "bert", TEXT, ["start_logits", "end_logits"], False),
    ("multiple-choice", "bert", TEXT, LOGITS, False),
    ("image-classification", "vit", ["pixel_values"], LOGITS, True),
    (
        "zero-shot-image-classification",
        "clip",
        ["input_ids", "attention_mask", "pixel_values"],
        ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"],
        False,
    ),
    ("automatic-speech-recognition", "wav2vec2", AUDIO, LOGITS, False),
    ("audio-classification", "wav2vec2", AUDIO, LOGITS, True),
]


@pytest.mark.parametrize(
    ("task", "model_type", "inputs", "outputs", "labelled"),
    CASES,
    ids=[f"{c[0]}-{c[1]}" for c in CASES],
)
def test_task_matches_torch_by_contract_names(
    task, model_type, inputs, outputs, labelled, tmp_path
):
    model, config = make_checkpoint(model_type, tmp_path / "ckpt", task=task)
    out = tmp_path / "onnx"
    assert main(["build", "--model", str(tmp_path / "ckpt"), "--output", str(out), "-q"]) == 0
    meta = json.loads((out / "mobius.json").read_text())
    assert meta["task"] == task
    assert meta["graphs"] == {"model.onnx": {"inputs": inputs, "outputs": outputs}}
    if labelled:
        assert meta["id2label"] == {str(k): v for k, v in config.id2label.items()}
    else:
        assert "id2label" not in meta
    report = json.loads((out / "explain.json").read_text())
    assert report["task"] == task and not report["summary"]["unsupported_ops"]
    diffs = contract_diffs(model, out, config)
    assert set(diffs) == set(outputs)
    assert max(diffs.values()) <= ATOL, diffs


def test_staged_convolutional_classifier_matches_torch(tmp_path):
    """A ResNet with the generated tiny config (every stage, narrow): batch norms, max and
    average pooling; logits of order 1, so atol 1e-4 is a real check."""
    from mobius.testing.configs import tiny_config_for

    small = tiny_config_for("resnet")
    sizes = {k: getattr(small, k) for k in ("hidden_sizes", "depths", "embedding_size")}
    model, config = make_checkpoint(
        "resnet", tmp_path / "ckpt", task="image-classification", **sizes
    )
    out = tmp_path / "onnx"
    assert main(["build", "--model", str(tmp_path / "ckpt"), "--output", str(out), "-q"]) == 0
    diffs = contract_diffs(model, out, config)
    assert max(diffs.values()) <= ATOL, diffs


@pytest.mark.parametrize(
    ("model_type", "architecture", "task"),
    [
        ("bert", "BertForMaskedLM", "fill-mask"),
        ("bert", "BertModel", "feature-extraction"),
        ("bert", "BertLMHeadModel", "text-generation"),
        ("roberta", "RobertaForTokenClassification", "token-classification"),
        ("llama", "LlamaForCausalLM", "text-generation"),
        ("llama", "LlamaForSequenceClassification", "text-classification"),
        ("vit", "ViTForImageClassification", "image-classification"),
        ("clip", "CLIPModel", "zero-shot-image-classification"),
        ("wav2vec2", "Wav2Vec2ForCTC", "automatic-speech-recognition"),
        ("wav2vec2", "Wav2Vec2ForSequenceClassification", "audio-classification"),
    ],
)
def test_task_is_detected_from_architectures(model_type, architecture, task):
    config = from_hf(tiny_config(model_type, architectures=[architecture]))
    assert detect_task(config).name == task


@pytest.mark.parametrize(
    ("model_type", "task"),
    [("bert", "feature-extraction"), ("llama", "text-generation"), ("vit", "feature-extraction")],
)
def test_without_architectures_the_model_type_decides(model_type, task):
    assert detect_task(from_hf(tiny_config(model_type))).name == task


def test_aliases_name_the_contract_task():
    assert get_task("causal-lm", from_hf(tiny_config("llama"))).name == "text-generation"
    vit = from_hf(tiny_config("vit"))
    assert get_task("image-feature-extraction", vit).name == "feature-extraction"
    with pytest.raises(ConfigError, match="needs a vision model"):
        get_task("image-feature-extraction", from_hf(tiny_config("bert")))


@pytest.mark.parametrize("command", ["build", "explain"])
def test_a_task_without_a_head_is_one_line_listing_the_heads(command, tmp_path, capsys):
    tiny_config("vit").save_pretrained(tmp_path / "vit")
    argv = [command, "--model", str(tmp_path / "vit"), "--task", "fill-mask"]
    argv += ["--output", str(tmp_path / "out"), "--no-weights"] if command == "build" else ["-q"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mobius: error: 'vit' has no fill-mask head")
    assert err.rstrip().endswith("its tasks: feature-extraction, image-classification")
    assert not (tmp_path / "out").exists()


def test_explain_reports_a_head_task(tmp_path, capsys):
    tiny_config("bert", architectures=["BertForTokenClassification"]).save_pretrained(tmp_path)
    assert main(["explain", "--model", str(tmp_path), "--color", "never"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("bert · token-classification · ")
    assert "classifier: Linear → lowered: linear" in text and "converts fully (exit 0)" in text
    assert (
        main(["explain", "--model", str(tmp_path), "--task", "question-answering", "--json", "-"])
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "question-answering"
    assert any(m["path"] == "qa_outputs" for m in report["modules"])


def test_a_head_on_an_encoder_decoder_is_its_head_task():
    """BART's classifier runs encoder and decoder in one call (the decoder on the shifted
    input_ids, as transformers does): a single-graph head like any other."""
    task = get_task("text-classification", from_hf(tiny_config("bart")))
    assert isinstance(task, HeadTask) and task.name == "text-classification"
    # HF's decoder has no padding mask of its own: its masks are traced, not rebuilt
    assert "mobius" not in task.attention_implementations
    assert (
        "mobius"
        in get_task("text-classification", from_hf(tiny_config("bert"))).attention_implementations
    )


def test_a_head_the_checkpoint_lacks_names_the_head_it_has(tmp_path, capsys):
    make_checkpoint("bert", tmp_path / "ckpt", task="feature-extraction")
    capsys.readouterr()  # save_pretrained's progress bar
    argv = ["build", "--model", str(tmp_path / "ckpt"), "--output", str(tmp_path / "out")]
    assert main([*argv, "--task", "fill-mask", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no tensor for parameter 'cls.predictions" in err
    assert err.rstrip().endswith("saved as BertModel (feature-extraction), not for fill-mask")
