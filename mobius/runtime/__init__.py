"""Running a converted package: the ``genai_config.json`` onnxruntime-genai reads (``genai.py``,
``genai_vlm.py``), a plain-onnxruntime runner per contract (``causal_lm.py``, ``static.py``,
``seq2seq.py``, ``vlm.py`` with ``canvas.py``), and ``mobius generate`` (``generate.py``), with
a LoRA ``.onnx_adapter`` made active (``genai_adapters.py``).

Numpy and onnxruntime, no torch: may import ``mobius.sources`` (the config's limits) and
``mobius.errors``.
"""
