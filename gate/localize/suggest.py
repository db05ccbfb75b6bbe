"""The repaired build as text: a gate recipe and each quantizer's own keep-list syntax (no torch).

Layers are named as transformers names the decoder blocks
(``model.layers.<i>``); a GGUF file names the same block ``blk.<i>``. The
snippets are the smallest change to each tool's usual call that leaves the
kept blocks in full precision:

* bitsandbytes (transformers): ``llm_int8_skip_modules`` (a name skips the
  module and everything below it, also for 4-bit loads);
* optimum-quanto: ``exclude`` (fnmatch patterns);
* llm-compressor: ``ignore`` (``re:`` marks a regular expression);
* llama.cpp ``llama-quantize``: one ``--tensor-type`` per block (a regular
  expression searched in the tensor names, ``f16`` kept);
* NVIDIA ModelOpt: the block's quantizers disabled in ``quant_cfg``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gate.models.recipes import Recipe, format_recipe, parse_recipe


def repaired_recipe(recipe: Recipe | str, kept_names: Sequence[str]) -> Recipe:
    """``recipe`` with ``kept_names`` added to its ``keep=`` globs (whole blocks)."""
    parsed = parse_recipe(recipe)
    keep = tuple(dict.fromkeys((*parsed.keep, *kept_names)))
    return parse_recipe(format_recipe(replace(parsed, keep=keep)))


def snippets(kept_names: Sequence[str], kept_indices: Sequence[int]) -> dict[str, str]:
    """The keep list in each quantizer's syntax (module doc), by tool."""
    names = list(kept_names)
    quoted = ", ".join(f'"{n}"' for n in ["lm_head", *names])
    quanto = ", ".join(f'"{n}"' for n in ["lm_head", *(f"{n}.*" for n in names)])
    regexes = ", ".join(['"lm_head"', *(f'"re:{n.replace(".", "[.]")}[.].*"' for n in names)])
    tensor_types = " ".join(f'--tensor-type "blk\\.{i}\\.=f16"' for i in kept_indices)
    modelopt = "; ".join(f'cfg["quant_cfg"]["*{n}.*"] = {{"enable": False}}' for n in names)
    return {
        "bitsandbytes": f"BitsAndBytesConfig(..., llm_int8_skip_modules=[{quoted}])",
        "quanto": f"quantize(model, weights=..., exclude=[{quanto}])",
        "llm-compressor": f'QuantizationModifier(targets="Linear", scheme=..., ignore=[{regexes}])',
        "llama.cpp": f"llama-quantize {tensor_types} model-f16.gguf out.gguf TYPE".replace(
            "  ", " "
        ),
        "modelopt": modelopt or "# nothing to disable",
    }


__all__ = ["repaired_recipe", "snippets"]
