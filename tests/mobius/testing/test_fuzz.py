"""Fuzzed inputs: every mutated tiny checkpoint converts with parity or is refused in one line.

A fixed, derandomised budget here (40 cases, about half a minute); ``python benchmarks/fuzz.py --minutes N`` runs
the same property for longer. Each ``@example`` is a case the fuzzer found crashing, kept as a
regression test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings

from mobius.testing.fuzz import BASES, Case, cases, run_case


@pytest.fixture(scope="module")
def fuzz_bases(checkpoints) -> dict[str, Path]:
    return {name: checkpoints.get(name)[0] for name in BASES}


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases)
# found by the fuzzer: each crashed with a traceback, or converted what HF cannot load
@example(case=Case("gpt2", (("set", "auto_map", 0),)))
@example(case=Case("llama", (("set", "rope_parameters", {"rope_type": "linear", "factor": None}),)))
@example(case=Case("qwen2", (("set", "quantization_config", [8]),)))
@example(case=Case("gemma3_text", (), (("meta", 3),)))
@example(case=Case("gemma3_text", (("set", "architectures", 64.0),)))
@example(
    case=Case("gpt2", (("set", "sliding_window", 5519816270020608.0),))
)  # HF fails at run time
# transformers' deprecation warning, or its logged "error", printed before the error line
@example(case=Case("gpt2", (("set", "layer_types", -1), ("set", "rope_scaling", [26]))))
@example(case=Case("llama", (("set", "pad_token_id", 300),)))
# 10000 layers declared, 2 in the checkpoint: minutes of tracing before the weights were refused
@example(case=Case("llama", (("set", "num_hidden_layers", 10_000),)))
@example(case=Case("llama", (("set", "text_config", 2**40),)))  # a bug of the layer-count check
def test_fuzzed_checkpoint_converts_or_is_refused(case: Case, fuzz_bases, fuzz_dir):
    outcome = run_case(case, fuzz_bases, fuzz_dir / "case")
    assert outcome.ok, f"{case}\n{outcome.detail}"


@pytest.mark.parametrize(
    ("case", "words"),
    [
        (Case("mixtral", (("set", "num_experts_per_tok", 5),)), "more than the 4 experts"),
        # torch's fake tensors logged the failing op's traceback before the error line
        (Case("mixtral", (("set", "num_local_experts", 0),)), "mixtral"),
        (Case("deepseek_v3", (("set", "n_group", 3),)), "does not divide the 8 routed"),
        (Case("deepseek_v3", (("set", "topk_group", 3),)), "topk_group=3 is more than n_group"),
        # two expert tensors gone: torch.cat failed while the weights were being written
        (Case("deepseek_v3", (), (("delete", 29), ("delete", 29))), "cannot assemble"),
    ],
)
def test_found_on_the_long_run_bases(case: Case, words: str, checkpoints, fuzz_dir):
    """Found by ``benchmarks/fuzz.py`` on bases the CI budget does not fuzz."""
    outcome = run_case(case, {case.base: checkpoints.get(case.base)[0]}, fuzz_dir / "found")
    assert outcome.kind == "refused", outcome.detail
    assert words in outcome.detail
