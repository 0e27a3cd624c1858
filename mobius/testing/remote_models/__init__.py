"""Modeling code as checkpoints ship it beside ``config.json`` (``auto_map``), one style per file.

``mobius.testing.remote_code`` copies these files into a checkpoint directory; transformers then
loads them as dynamic modules, as it loads any checkpoint's own code.
"""
