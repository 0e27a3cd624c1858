"""Harness for component tests: build a graph around one component, run it in onnxruntime CPU."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import onnxscript
import pytest

_NP_TO_IR = {
    np.dtype(np.float32): ir.DataType.FLOAT,
    np.dtype(np.float16): ir.DataType.FLOAT16,
    np.dtype(np.int64): ir.DataType.INT64,
}


class Harness:
    """One graph: ``input``/``weight`` add values, the test calls the component on ``op``, ``run`` executes.

    Inputs get symbolic dimensions (all but the last), so components cannot lean on static shapes.
    """

    def __init__(self) -> None:
        self.graph = ir.Graph([], [], nodes=[], opset_imports={"": 23}, name="component")
        self.builder = onnxscript.GraphBuilder(self.graph)
        self.op = self.builder.op
        self.feeds: dict[str, np.ndarray] = {}

    def input(self, name: str, array: np.ndarray, static: bool = False) -> ir.Value:
        dims = (
            list(array.shape)
            if static or array.ndim == 0
            else [f"{name}_{i}" for i in range(array.ndim - 1)] + [array.shape[-1]]
        )
        value = self.builder.input(name, dtype=_NP_TO_IR[array.dtype], shape=dims)
        self.feeds[name] = array
        return value

    def weight(self, name: str, array: np.ndarray) -> ir.Value:
        """An existing numpy-backed initializer, as the pattern matcher would hand to a component."""
        return self.builder.initializer(
            ir.tensor(np.ascontiguousarray(array), name=name), name=name, qualify=False
        )

    def model(self, *outputs: ir.Value) -> ir.Model:
        for i, value in enumerate(outputs):
            self.builder.add_output(value, f"output_{i}")
        return ir.Model(self.graph, ir_version=10)

    def run(self, *outputs: ir.Value) -> list[np.ndarray]:
        proto = ir.serde.serialize_model(self.model(*outputs))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        return session.run(None, self.feeds)


@pytest.fixture
def harness() -> Harness:
    return Harness()


def load_state(module, state: dict[str, np.ndarray]) -> None:
    """Give a component's Parameters data from an HF-named state dict (the declarative path)."""
    module.load_state_dict({k: ir.tensor(np.ascontiguousarray(v)) for k, v in state.items()})


@pytest.fixture
def load():
    return load_state


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
