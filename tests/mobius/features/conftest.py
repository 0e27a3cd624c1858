"""The tiny Llama of the test run (GQA, the packed attention block) converted once; each feature
is applied to a fresh copy of it loaded from disk, so no test pays for a second conversion."""

from __future__ import annotations

import pytest

from mobius.testing.features import Converted


@pytest.fixture(scope="session")
def converted(checkpoints, tmp_path_factory) -> Converted:
    directory, hf, _ = checkpoints.get("llama")
    return Converted(tmp_path_factory.mktemp("features"), directory, hf)
