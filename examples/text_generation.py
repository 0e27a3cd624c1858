"""Generate text from a model converted by ``mobius build``, streaming tokens as they come.

With onnxruntime-genai installed, the output directory alone is enough (``genai_config.json``,
the graph and the tokenizer); without it, the same greedy loop runs on plain onnxruntime.

    python examples/text_generation.py out/smollm2 "What is the capital of France?"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

directory, prompt = Path(sys.argv[1]), sys.argv[2]
messages = json.dumps([{"role": "user", "content": prompt}])
template = directory / "chat_template.jinja"

try:
    import onnxruntime_genai as og
except ImportError:  # plain onnxruntime: mobius's own loop, the same tokens
    from mobius.runtime.generate import generate

    for piece in generate(directory, prompt, max_new_tokens=64):
        print(piece, end="", flush=True)
else:
    model = og.Model(str(directory))
    tokenizer = og.Tokenizer(model)
    if template.is_file():  # an instruct model: the prompt becomes one user turn
        prompt = tokenizer.apply_chat_template(
            messages, template_str=template.read_text(), add_generation_prompt=True
        )
    ids = tokenizer.encode(prompt)
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids) + 64)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    stream = tokenizer.create_stream()
    while not generator.is_done():
        generator.generate_next_token()
        print(stream.decode(generator.get_next_tokens()[0]), end="", flush=True)
print()
