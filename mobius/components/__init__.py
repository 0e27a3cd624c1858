"""Hand-authored onnxscript components (``onnxscript.nn.Module``) emitted for matched patterns."""
