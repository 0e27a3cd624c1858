"""Helpers to make tiny random-weight checkpoints and compare ONNX with PyTorch."""
