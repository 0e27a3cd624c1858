"""Why a vision-language model converts without its image path (``tasks/vlm_unsplit.py``): the
reason ``why_not_split`` gives the refusal, the text-only warning (``warn_text_only``) and
``mobius explain``'s ``image`` gap (text and explain.json), or the error when the text path does
not trace either. Config only: no weights are read."""

from __future__ import annotations

import json
import logging

import pytest

import mobius
from mobius.cli import main
from mobius.errors import UnsupportedError
from mobius.findings import Analysis, ModuleAnalysis
from mobius.report import ExplainReport
from mobius.report.schema import errors
from mobius.sources.config import from_hf
from mobius.tasks.vlm_unsplit import (
    IMAGE_TASK_HINT,
    image_path_left_out,
    warn_text_only,
    why_not_split,
)
from mobius.testing.configs import tiny_config_for


def test_explain_says_why_the_image_path_is_left_out():
    mllama = from_hf(tiny_config_for("mllama"))
    reason = why_not_split(mllama)
    assert reason is not None and "cross-attends" in reason
    analysis = Analysis(
        model_type="mllama",
        task="text-generation",
        kv_cache=True,
        cache_supported=True,
        unclaimed_attention=[],
        modules=[ModuleAnalysis("", "MllamaForCausalLM")],
        image_path_left_out=image_path_left_out(mllama, "text-generation"),
    )
    report = ExplainReport.from_analysis(analysis, source="tiny-mllama")
    data = json.loads(report.to_json())
    assert errors(data) == []
    step = f"the image path is not converted (task text-generation): {reason}"
    assert [g for g in data["summary"]["gaps"] if g["kind"] == "image"] == [
        {"kind": "image", "subject": "image-path", "modules": [], "next_step": step}
    ]
    assert f"  - {step}" in report.render_text().splitlines()
    assert report.exit_code == 0  # a note, not a failure: the text path converts
    # nothing is left out by the three graphs, nor for a model outside the mapping
    assert image_path_left_out(mllama, "image-text-to-text") is None
    assert image_path_left_out(from_hf(tiny_config_for("llama")), "text-generation") is None
    # a VLM that splits, converted as text: the task that converts its image too
    llava = from_hf(tiny_config_for("llava"))
    assert image_path_left_out(llava, "text-generation") == IMAGE_TASK_HINT
    # GIT prepends its image rows (tasks/vlm_prepend.py): it splits too
    git = from_hf(tiny_config_for("git"))
    assert why_not_split(git) is None
    assert image_path_left_out(git, "text-generation") == IMAGE_TASK_HINT


def test_a_text_path_that_does_not_trace_says_why_not_split(tmp_path, monkeypatch):
    # PI0's forward needs actions (its text path cannot be traced alone): the error names why
    # the image-text-to-text contract is not the way out either
    from mobius.synth import prepare

    def fails(*args, **kwargs):
        raise UnsupportedError("torch.export could not trace pi0 (TypeError: no actions)")

    monkeypatch.setattr(prepare, "trace_with_fallbacks", fails)
    tiny_config_for("pi0").save_pretrained(tmp_path)
    with pytest.raises(UnsupportedError, match=r"no actions\); pi0 .* does not generate text"):
        mobius.explain(tmp_path)


def _warning(caplog) -> str:
    return " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")


@pytest.mark.parametrize("with_processor", [False, True])
def test_vision_language_text_path_is_flagged(caplog, tmp_path, with_processor):
    if with_processor:
        (tmp_path / "preprocessor_config.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="mobius"):
        warn_text_only(tiny_config_for("llava"), tmp_path, "feature-extraction")
        warn_text_only(tiny_config_for("llama"), tmp_path, "causal-lm")  # no vision: silent
    warning = _warning(caplog)
    assert len(caplog.records) == 1
    assert "llava is a vision-language model" in warning and "text path only" in warning
    assert ("no preprocessor_config.json" in warning) is not with_processor


def test_vision_language_checkpoint_builds_its_text_path_with_a_warning(capsys, caplog, tmp_path):
    folder = tmp_path / "llava"
    tiny_config_for("llava", architectures=["LlavaForConditionalGeneration"]).save_pretrained(
        folder
    )
    capsys.readouterr()
    out = ["--output", str(tmp_path / "out"), "--no-weights", "--task", "feature-extraction"]
    code = main(["build", "--model", str(folder), *out])  # detected: image-text-to-text
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "out" / "model.onnx").is_file()
    warning = _warning(caplog)
    assert "llava is a vision-language model" in warning
    assert "no preprocessor_config.json or processor_config.json" in warning
