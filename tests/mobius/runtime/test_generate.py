"""``mobius generate``: greedy text from a converted model through onnxruntime-genai or onnxruntime.

The bundled tiny Llama (random weights) is converted once. What the CLI prints must be the
decoding of HF ``generate``'s greedy tokens: with the transformers tokenizer on the onnxruntime
path, with genai's streaming decoder on the genai path (it drops the incomplete UTF-8 bytes that a
random model's byte-level tokens leave, where transformers prints U+FFFD).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

import mobius
from mobius.cli import main
from mobius.runtime.genai import GENAI_CONFIG_FILE

EXAMPLE = Path(__file__).parents[3] / "examples" / "tiny-llama"
PROMPT = "The quick brown fox"
NEW_TOKENS = 12
# a minimal chat template in the example tokenizer's own special tokens
TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory) -> Path:
    return mobius.build(EXAMPLE).save(tmp_path_factory.mktemp("generate") / "tiny-llama")


@pytest.fixture(scope="module")
def hf():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(EXAMPLE, attn_implementation="eager").eval()
    return model, AutoTokenizer.from_pretrained(EXAMPLE)


def hf_greedy(model, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False)
    return [t for t in out[0, len(ids) :].tolist() if t != model.generation_config.eos_token_id]


def run_cli(capsys, directory: Path, *flags: str) -> tuple[int, str, str]:
    code = main(
        ["generate", "--model", str(directory), "--prompt", PROMPT, "--max-new-tokens"]
        + [str(NEW_TOKENS), "-q", *flags]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_onnxruntime_prints_hf_text(onnx_dir, hf, capsys):
    model, tokenizer = hf
    expected = tokenizer.decode(hf_greedy(model, tokenizer(PROMPT)["input_ids"]))
    code, out, _ = run_cli(capsys, onnx_dir, "--runtime", "onnxruntime")
    assert code == 0
    assert out == expected + "\n"


def test_genai_prints_hf_tokens(onnx_dir, hf, capsys):
    import onnxruntime_genai as og  # in the testing extra: a missing one fails, never skips

    model, _ = hf
    genai_tokenizer = og.Tokenizer(og.Model(str(onnx_dir)))
    ids = [int(i) for i in genai_tokenizer.encode(PROMPT)]
    stream = genai_tokenizer.create_stream()
    expected = "".join(stream.decode(t) for t in hf_greedy(model, ids))
    code, out, _ = run_cli(capsys, onnx_dir, "--runtime", "genai")
    assert code == 0
    assert out == expected + "\n"


@pytest.mark.parametrize("runtime", ["onnxruntime", "genai"])
def test_chat_template_wraps_the_prompt(onnx_dir, hf, tmp_path, capsys, runtime):
    """With a chat template beside the model the prompt becomes a user turn (by default)."""
    model, tokenizer = hf
    chat_dir = tmp_path / "chat"
    shutil.copytree(onnx_dir, chat_dir)
    (chat_dir / "chat_template.jinja").write_text(TEMPLATE)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}],
        chat_template=TEMPLATE,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=True,
    )["input_ids"]
    assert ids[0] == 1 and ids[1] != 1  # the template's <s>, once
    tokens = hf_greedy(model, ids)
    if runtime == "genai":
        import onnxruntime_genai as og

        stream = og.Tokenizer(og.Model(str(chat_dir))).create_stream()
        expected = "".join(stream.decode(t) for t in tokens)
    else:
        expected = tokenizer.decode(tokens)
    code, out, _ = run_cli(capsys, chat_dir, "--runtime", runtime)
    assert code == 0
    assert out == expected + "\n"
    code, out, _ = run_cli(capsys, chat_dir, "--runtime", runtime, "--no-chat")
    assert out != expected + "\n"  # the raw prompt continues differently


def test_auto_falls_back_to_onnxruntime_without_genai_config(onnx_dir, tmp_path, capsys):
    bare = tmp_path / "bare"
    shutil.copytree(onnx_dir, bare)
    (bare / GENAI_CONFIG_FILE).unlink()
    code, out, err = run_cli(capsys, bare)
    assert code == 0 and out.strip()
    code = main(["generate", "--model", str(bare), "--prompt", PROMPT, "--max-new-tokens", "2"])
    assert "generating with onnxruntime" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no-model", "has no model.onnx; convert a model with `mobius build`"),
        ("genai-without-config", "has no genai_config.json"),
        ("chat-without-template", "has no chat template; drop --chat"),
        ("zero-tokens", "--max-new-tokens must be at least 1"),
        (
            "not-a-causal-lm",
            "holds a feature-extraction model; generate needs a text-generation one",
        ),
    ],
)
def test_refusals_are_one_line(onnx_dir, tmp_path, capsys, case, message):
    directory, flags = onnx_dir, []
    if case == "no-model":
        directory = tmp_path
    elif case == "genai-without-config":
        directory = tmp_path / "bare"
        shutil.copytree(onnx_dir, directory)
        (directory / GENAI_CONFIG_FILE).unlink()
        flags = ["--runtime", "genai"]
    elif case == "chat-without-template":
        flags = ["--chat"]
    elif case == "not-a-causal-lm":
        directory = tmp_path / "encoder"
        shutil.copytree(onnx_dir, directory)
        info = json.loads((directory / "mobius.json").read_text())
        (directory / "mobius.json").write_text(json.dumps({**info, "task": "feature-extraction"}))
    args = ["generate", "--model", str(directory), "--prompt", PROMPT, *flags]
    args += ["--max-new-tokens", "0" if case == "zero-tokens" else "2"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mobius: error: ") and message in err[0], err


def test_genai_config_json_is_valid_for_genai(onnx_dir):
    import onnxruntime_genai as og

    config = json.loads((onnx_dir / GENAI_CONFIG_FILE).read_text())
    assert config["model"]["type"] == "llama"
    og.Model(str(onnx_dir))  # loads: genai accepts every field


def test_example_script_prints_what_the_cli_prints(onnx_dir, capsys):
    """examples/text_generation.py (genai when installed, else mobius's loop) = mobius generate."""
    import os
    import subprocess
    import sys

    script = EXAMPLE.parent / "text_generation.py"
    done = subprocess.run(
        [sys.executable, str(script), str(onnx_dir), PROMPT],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(EXAMPLE.parents[1])},
    )
    code = main(
        ["generate", "--model", str(onnx_dir), "--prompt", PROMPT, "--max-new-tokens"]
        + ["64", "-q", "--no-chat"]
    )
    assert code == 0
    assert done.stdout == capsys.readouterr().out
