"""llama.cpp's quantization types as gate recipes (``gguf-*``), and llama.cpp as their engine.

``types`` (the types, declared once), ``install`` (where llama.cpp is built),
``make`` (converter and llama-quantize, cached by content), ``select``
(``keep=``/``only=`` as per-tensor types), ``written`` (what a file holds, the
recipe's proof of activity) and ``served`` (``--engine llama.cpp``); docs/gguf.md.
"""
