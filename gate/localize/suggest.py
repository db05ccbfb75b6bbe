"""The repaired build as text: a gate recipe and each quantizer's own keep-list syntax (no torch).

Layers are named as transformers names the decoder blocks
(``model.layers.<i>``); a GGUF file names the same block ``blk.<i>``. The
snippets are the smallest change to each tool's usual call that leaves the
kept blocks in full precision. Each toolkit gate runs declares its own syntax on
its method class (:attr:`~gate.models.methods.base.CompressionMethod.toolkit`,
:meth:`~gate.models.methods.base.CompressionMethod.keep_syntax`), read from the
methods' registry in catalogue order:

* bitsandbytes (transformers): ``llm_int8_skip_modules``
  (:mod:`gate.models.methods.bnb`);
* optimum-quanto: ``exclude`` (:mod:`gate.models.methods.quanto`);
* llm-compressor: ``ignore`` (:mod:`gate.models.methods.checkpoint`, the
  checkpoints it makes);
* llama.cpp ``llama-quantize``: ``--tensor-type`` per block (the ``gguf-*``
  method, in the llama.cpp engine's folder);

and, last, the one toolkit gate does not run, so no method declares it, written
here: NVIDIA ModelOpt, the block's quantizers disabled in ``quant_cfg``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gate.models.methods.registry import methods
from gate.models.recipes import Recipe, format_recipe, parse_recipe

#: NVIDIA ModelOpt's label: no gate method runs it (module doc).
MODELOPT = "modelopt"


def repaired_recipe(recipe: Recipe | str, kept_names: Sequence[str]) -> Recipe:
    """``recipe`` with ``kept_names`` added to its ``keep=`` globs (whole blocks)."""
    parsed = parse_recipe(recipe)
    keep = tuple(dict.fromkeys((*parsed.keep, *kept_names)))
    return parse_recipe(format_recipe(replace(parsed, keep=keep)))


def modelopt_syntax(kept_names: Sequence[str]) -> str:
    """ModelOpt's: the kept blocks' quantizers disabled in ``quant_cfg``."""
    disabled = "; ".join(f'cfg["quant_cfg"]["*{n}.*"] = {{"enable": False}}' for n in kept_names)
    return disabled or "# nothing to disable"


def snippets(kept_names: Sequence[str], kept_indices: Sequence[int]) -> dict[str, str]:
    """The keep list in each quantizer's syntax (module doc), by toolkit: the methods'
    toolkits in catalogue order, then ModelOpt."""
    names, indices = list(kept_names), list(kept_indices)
    found: dict[str, str] = {}
    for method in methods().values():
        if method.toolkit is not None and method.toolkit not in found:
            found[method.toolkit] = method.keep_syntax(names, indices)
    found[MODELOPT] = modelopt_syntax(names)
    return found


__all__ = ["MODELOPT", "modelopt_syntax", "repaired_recipe", "snippets"]
