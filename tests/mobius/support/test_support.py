"""``mobius list`` and ``mobius info``: the shipped support table, checked against docs/coverage.md
and against the sweep results it is generated from (``benchmarks/results/task_coverage.json``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mobius.cli import main
from mobius.support import table

ROOT = Path(__file__).resolve().parents[3]
COVERAGE = (ROOT / "docs" / "coverage.md").read_text()


def docs_row(heading: str, first_cell: str) -> list[str]:
    """The cells of the row for ``first_cell`` in the first table after ``heading``."""
    section = COVERAGE[COVERAGE.index(heading) :]
    match = re.search(rf"^\| {re.escape(first_cell)} \|(.*)\|$", section, re.M)
    assert match, (heading, first_cell)
    return [c.strip() for c in match.group(1).split("|")]


# (model type, task, heading of its docs/coverage.md table)
DOCUMENTED = [
    ("llama", "text-generation", "## Per type"),  # the causal table (after the other release's)
    ("bert", "fill-mask", "## fill-mask"),
    ("t5", "text2text-generation", "# Encoder–decoder coverage"),
    ("xlstm", "text-generation", "## Per type"),
    ("UNet2DConditionModel", "diffusers", "# Diffusers model classes"),
]


@pytest.mark.parametrize(("model_type", "task", "heading"), DOCUMENTED)
def test_info_agrees_with_the_coverage_docs(model_type, task, heading, capsys):
    assert main(["info", model_type]) == 0
    out = capsys.readouterr().out
    [result] = [r for r in table.results(model_type) if r.task == task]
    cells = docs_row(heading, model_type)
    assert cells[0] == result.status
    diff = f"{result.max_diff:.1e}"
    assert diff in cells[1] or diff in cells[2]  # the diffusers table has a graphs column first
    assert re.search(rf"{re.escape(task)}\s+{result.status}, max diff {diff}", out)


def test_info_says_why_a_type_fails_and_for_which_transformers(capsys, monkeypatch):
    monkeypatch.setattr("mobius.versions.version_of", lambda name: "9.9.9")
    assert main(["info", "mllama"]) == 0
    out = capsys.readouterr().out
    assert "image-text-to-text  convert-error" in out and "known limits:" in out
    assert "cross-attends to the image's states" in out
    made = table.made_with()["transformers"]
    assert f"Note: the table was made with transformers {made}; 9.9.9 is installed" in out


def test_vlm_types_listed_as_passing_in_the_docs():
    passing = COVERAGE[COVERAGE.index("# Vision–language models") :].split("pass all four checks")[
        1
    ]
    for model_type in ("llava", "qwen2_vl", "gemma3"):
        assert f" {model_type}," in passing.split("Ninth session")[0]
        assert table.results(model_type)[0].status == "pass"


def test_unknown_type_and_task_exit_2(capsys):
    assert main(["info", "lama"]) == 2
    assert "did you mean llama" in capsys.readouterr().err
    assert main(["list", "--task", "nope"]) == 2
    assert "no task 'nope' in the support table" in capsys.readouterr().err


def test_list_by_task(capsys):
    assert main(["list", "--task", "causal-lm"]) == 0  # an alias of text-generation
    out = capsys.readouterr().out
    assert re.search(r"^llama\s+pass, max diff", out, re.M)
    assert not re.search(r"^gemma3n\s", out, re.M)  # HF cannot build it tiny: only with --all
    assert main(["list", "--task", "text-generation", "--all"]) == 0
    assert re.search(r"^gemma3n\s+hf-build-error", capsys.readouterr().out, re.M)


def test_table_is_generated_from_the_results():
    """``mobius/support/table.json`` is what ``benchmarks/support_table.py`` makes of the
    sweeps' results now (rerun it after a sweep)."""
    done = subprocess.run(
        [sys.executable, "benchmarks/support_table.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
