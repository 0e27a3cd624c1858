"""What goes out: the checkpoint's tensors streamed into initializers named by their state-dict
keys, cast and transposed lazily (``weights.py``), written past the page cache where that pays
(``direct_io.py``), and the ``ModelPackage`` that saves the graphs, their data and the files
beside them atomically (``package.py``; ``saving.py`` is what one save shares with its writers).

May import ``mobius.sources`` (headers, key mapping), ``lowering.dtypes``, ``mobius.errors`` and
``mobius.failures``; nothing that traces or emits.
"""
