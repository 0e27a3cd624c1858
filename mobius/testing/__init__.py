"""Tiny random-weight checkpoints and comparisons of ONNX with PyTorch, for the tests and the
benchmarks. It stands above the whole package (it drives the CLI and the public API) and may
import any of it; nothing in mobius imports it."""
