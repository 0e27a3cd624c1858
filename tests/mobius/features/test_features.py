"""``--features`` parsing and the registry: comma lists, repeats, refusals (one line, exit 2)."""

from __future__ import annotations

import json

import pytest

from mobius.cli import main
from mobius.errors import ConfigError
from mobius.features import ORDER, apply_features, known, parse_features
from mobius.output.package import ModelPackage
from mobius.testing.features import load_package


def test_comma_lists_and_repeats_in_application_order():
    assert parse_features(["fp8-kv-cache,prune-prefill-prefix", "text-only", " fp8-kv-cache "]) == (
        "text-only",
        "prune-prefill-prefix",
        "fp8-kv-cache",
    )
    assert parse_features([]) == ()
    assert set(known()) == set(ORDER)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--features", "static-cache,turbo"], ["unknown feature 'turbo'", *ORDER]),
        (
            ["--features", "static-cache", "--features", "fp8-kv-cache"],
            ["cannot be combined", "TensorScatter"],
        ),
        (["--max-seq-len", "64"], ["add --features static-cache"]),
    ],
)
def test_cli_refuses_in_one_line(capsys, tmp_path, flags, words):
    """Refused before the model is even looked for (the path does not exist)."""
    code = main(
        ["build", "--model", str(tmp_path / "nowhere"), "--output", str(tmp_path / "o")] + flags
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("mobius: error: ")
    for word in words:
        assert word in err
    assert not (tmp_path / "o").exists()


def test_text_only_is_a_no_op_on_a_causal_lm(converted):
    before = load_package(converted.base)
    after = apply_features(load_package(converted.base), ["text-only"])
    assert [n.op_type for n in after.model.graph] == [n.op_type for n in before.model.graph]
    assert json.loads(after.texts["mobius.json"])["features"] == ["text-only"]


def test_text_only_refuses_other_tasks(converted):
    package = load_package(converted.base)
    package.texts["mobius.json"] = json.dumps({"task": "image-classification"})
    with pytest.raises(ConfigError, match="text-only applies to .* image-classification"):
        apply_features(package, ["text-only"])


def test_cache_features_need_a_cache(converted):
    package = load_package(converted.base)
    graph = package.model.graph
    for value in [v for v in graph.inputs if v.name.startswith("past_key_values.")]:
        graph.inputs.remove(value)  # as if built without a cache (only the check reads this)
    for feature in ("static-cache", "prune-prefill-prefix", "fp8-kv-cache"):
        with pytest.raises(ConfigError, match=f"{feature} needs a key/value cache"):
            apply_features(package, [feature])


def test_several_graphs_are_refused():
    package = ModelPackage(model=None, models={"encoder_model": None, "decoder_model": None})
    with pytest.raises(ConfigError, match="single-graph causal LMs"):
        apply_features(package, ["prune-prefill-prefix"])


def test_cli_applies_features_and_release(converted, monkeypatch, capsys, tmp_path):
    """The flags reach the package: the conversion itself is the fixture's (not redone here)."""
    import mobius

    monkeypatch.setattr(mobius, "build", lambda *a, **k: load_package(converted.base))
    out = tmp_path / "out"
    flags = ["--features", "prune-prefill-prefix", "--features", "static-cache"]
    code = main(
        ["build", "--model", "x", "--output", str(out), *flags, "--max-seq-len", "32"]
        + ["--release", "-q"]
    )
    assert code == 0, capsys.readouterr().err
    info = json.loads((out / "mobius.json").read_text())
    assert info["features"] == ["prune-prefill-prefix", "static-cache"]
    import onnx

    model = onnx.load(out / "model.onnx", load_external_data=False)
    meta = {p.key: p.value for p in model.metadata_props}
    assert (
        meta["mobius.release"] == "true"
        and meta["mobius.features"] == "prune-prefill-prefix,static-cache"
    )
    assert model.graph.input[3].type.tensor_type.shape.dim[2].dim_value == 32
