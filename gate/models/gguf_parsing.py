"""transformers reads a ``.gguf`` file's metadata once, not once per part it loads.

``from_pretrained(directory, gguf_file=name)`` parses the file's whole metadata
(for SmolLM2-135M: 49,152 vocabulary entries and their merges) in every part
that reads it: the config twice, the tokenizer and the weights, about 6 s each
on this project's 2-core host, and builds llama.cpp's tensor-name map once per
module of the model (397 times for SmolLM2, about 10 s). Measured with cProfile:
one in-process SmolLM2 load spent 25 s in the ``gguf`` reader and 10.5 s in the
name maps of its 52.5 s.

:func:`install_gguf_parsing` makes two of those calls remember their answers for the
process, both keyed by what determines them:

* ``load_gguf_checkpoint(path, return_tensors=False)`` — by the file's path,
  size and modification time; each caller gets a deep copy (they edit the
  dicts they read);
* ``gguf.get_tensor_name_map(arch, n_blocks)`` — by its arguments (the map is
  read, never changed, by transformers' weight mapping).

The weights themselves are still read by transformers on each load. Installed
once per process, before a ``.gguf`` loads (:mod:`gate.models.backends.loading`).
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable
from typing import Any

_INSTALLED: list[bool] = []


def _remembering_metadata(load: Callable[..., Any]) -> Callable[..., Any]:
    parsed: dict[tuple[str, int, int], Any] = {}

    @functools.wraps(load)
    def wrapper(path: Any, return_tensors: bool = False, *args: Any, **kwargs: Any) -> Any:
        if return_tensors or args or kwargs:
            return load(path, return_tensors, *args, **kwargs)
        stat = os.stat(path)
        key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
        if key not in parsed:
            parsed[key] = load(path, return_tensors=False)
        return copy.deepcopy(parsed[key])

    return wrapper


def install_gguf_parsing() -> None:
    """Make transformers' GGUF metadata parse and llama.cpp's tensor-name maps remembered
    for the process (module doc); a second call changes nothing."""
    if _INSTALLED:
        return
    import gguf
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    gguf_utils.load_gguf_checkpoint = _remembering_metadata(gguf_utils.load_gguf_checkpoint)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=64)(gguf.get_tensor_name_map)
    _INSTALLED.append(True)


__all__ = ["install_gguf_parsing"]
