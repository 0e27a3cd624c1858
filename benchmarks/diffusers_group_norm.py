"""onnxruntime's time for one group norm in its two exact ONNX forms, at a UNet's shapes.

``GroupNormalization``-21 against ``Reshape [N, groups, -1]`` -> ``InstanceNormalization`` ->
``Reshape`` -> ``Mul``/``Add`` (what ``patterns/group_norm.py`` emits), on the CPU provider; both
are checked against torch's ``group_norm`` first. Medians of 9 runs.

    python benchmarks/diffusers_group_norm.py [--threads N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import TensorProto, helper, numpy_helper

SHAPES = [((2, 320, 64, 64), 32), ((2, 1280, 8, 8), 32), ((1, 128, 256, 256), 32)]


def group_norm_model(form: str, weight: np.ndarray, bias: np.ndarray, groups: int, eps: float):
    channels = weight.shape[0]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, "H", "W"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if form == "GroupNormalization":
        inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
        nodes = [helper.make_node(form, ["x", "w", "b"], ["y"], num_groups=groups, epsilon=eps)]
    else:
        arrays = {
            "groups": np.array([0, groups, -1], np.int64),
            "ones": np.ones(groups, np.float32), "zeros": np.zeros(groups, np.float32),
            "w": weight.reshape(channels, 1, 1), "b": bias.reshape(channels, 1, 1),
        }  # fmt: skip
        inits = [numpy_helper.from_array(v, k) for k, v in arrays.items()]
        nodes = [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Reshape", ["x", "groups"], ["grouped"]),
            helper.make_node(
                "InstanceNormalization", ["grouped", "ones", "zeros"], ["normed"], epsilon=eps
            ),  # fmt: skip
            helper.make_node("Reshape", ["normed", "shape"], ["back"]),
            helper.make_node("Mul", ["back", "w"], ["scaled"]),
            helper.make_node("Add", ["scaled", "b"], ["y"]),
        ]
    graph = helper.make_graph(nodes, "group_norm", [x], [y], inits)
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: ORT's)")
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    rng = np.random.default_rng(0)
    print("| shape | GroupNormalization-21 ms | InstanceNormalization form ms | speed-up |")
    print("| --- | --- | --- | --- |")
    for shape, groups in SHAPES:
        x = rng.standard_normal(shape, dtype=np.float32)
        weight = rng.standard_normal(shape[1], dtype=np.float32)
        bias = rng.standard_normal(shape[1], dtype=np.float32)
        expected = torch.nn.functional.group_norm(
            torch.from_numpy(x), groups, torch.from_numpy(weight), torch.from_numpy(bias)
        ).numpy()
        times = {}
        for form in ("GroupNormalization", "InstanceNormalization"):
            model = group_norm_model(form, weight, bias, groups, 1e-5)
            session = ort.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])  # fmt: skip
            got = session.run(None, {"x": x})[0]
            assert np.abs(got - expected).max() < 1e-4, form
            runs = []
            for _ in range(9):
                started = time.perf_counter()
                session.run(None, {"x": x})
                runs.append(time.perf_counter() - started)
            times[form] = sorted(runs)[4] * 1e3
        a, b = times["GroupNormalization"], times["InstanceNormalization"]
        print(f"| {shape} | {a:.2f} | {b:.2f} | {a / b:.1f}x |")


if __name__ == "__main__":
    main()
