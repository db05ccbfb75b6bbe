"""Layer selection (``keep=``/``only=``) of a ``gguf-*`` recipe as llama-quantize's per-tensor types.

A selective recipe names Hugging Face modules (``gguf-q4_k_m:keep=model.layers.0.*``,
the repair ``gate localize`` suggests; docs/localize.md). llama-quantize names
GGUF tensors (``blk.0.attn_q.weight``) and takes per-tensor types as
``--tensor-type REGEX=TYPE`` (``tools/quantize/quantize.cpp``: the regex is
searched in each tensor's name, the first that matches wins, and it overrides
the file type's mix for that tensor). The two names are joined by the ``gguf``
package's tensor-name map of the file's architecture
(``model.layers.N.self_attn.q_proj`` <-> ``blk.N.attn_q``,
``model.embed_tokens`` <-> ``token_embd``, ``lm_head`` <-> ``output``), applied
to the weight names of the model's safetensors files.

Every tensor of a module the recipe does not select (:meth:`Recipe.selects
<gate.models.recipes.Recipe.selects>`) gets one anchored override
(``^blk\\.0\\.attn_q\\.weight$=f16``) to the type the converter wrote it in
(F16; norms stay F32 anyway): it is left as converted. A glob that selects no
module of the model is refused (exit 4), as for the other weight recipes.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from gate.engines.llama_cpp.types import type_name
from gate.errors import ConfigError
from gate.models.gguf_header import GGUFHeader
from gate.models.recipes import Recipe, module_matches

_BLOCK = re.compile(r"^blk\.(\d+)\.")
_SUFFIXES = (".weight", ".bias")


@dataclass(frozen=True)
class Kept:
    """The tensors a selective recipe leaves as converted, and their llama-quantize overrides."""

    #: ``{GGUF tensor name: type it stays in}`` (``{"blk.0.attn_q.weight": "F16"}``).
    tensors: dict[str, str]

    def arguments(self) -> list[str]:
        """``--tensor-type ^NAME$=type`` for each kept tensor, in file order."""
        out: list[str] = []
        for name, kind in self.tensors.items():
            out += ["--tensor-type", f"^{re.escape(name)}$={kind.lower()}"]
        return out


def safetensors_names(directory: Path) -> list[str]:
    """The tensor names of every ``*.safetensors`` file in ``directory`` (their JSON headers)."""
    names: list[str] = []
    for path in sorted(directory.glob("*.safetensors")):
        with path.open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        names += [key for key in header if key != "__metadata__"]
    return names


def module_map(header: GGUFHeader, hf_names: list[str]) -> dict[str, str]:
    """``{GGUF tensor name: Hugging Face module}`` for the file's tensors the map can join."""
    import gguf
    from gguf.constants import MODEL_ARCH_NAMES

    arch_name = header.strings.get("general.architecture", "")
    archs = {name: arch for arch, name in MODEL_ARCH_NAMES.items()}
    if arch_name not in archs:
        raise ConfigError(
            f"keep=/only= cannot map the tensors of a {arch_name!r} GGUF to module names",
            "drop the layer selection for this model",
        )
    blocks = [int(m.group(1)) for t in header.tensors if (m := _BLOCK.match(t.name))]
    names = gguf.get_tensor_name_map(archs[arch_name], max(blocks, default=-1) + 1)
    modules: dict[str, str] = {}
    for key in hf_names:
        for suffix in _SUFFIXES:
            if key.endswith(suffix):
                module = key[: -len(suffix)]
                base = names.get_name(module)
                if base is not None:
                    modules[base + suffix] = module
    return {t.name: modules[t.name] for t in header.tensors if t.name in modules}


def kept_tensors(recipe: Recipe, header: GGUFHeader, source_dir: Path) -> Kept:
    """The tensors of the converted file (``header``) that ``recipe`` leaves unquantized."""
    if not (recipe.keep or recipe.only):
        return Kept({})
    modules = module_map(header, safetensors_names(source_dir))
    for key, globs in (("keep", recipe.keep), ("only", recipe.only)):
        for glob in globs:
            if not any(module_matches(glob, m) for m in modules.values()):
                raise ConfigError(
                    f"{recipe}: {key}={glob} matches no module of the model",
                    "name modules as the model's Hugging Face weights do, e.g. model.layers.0.*",
                )
    types = {t.name: type_name(t.ggml_type) for t in header.tensors}
    kept = {
        name: types[name]
        for name, module in modules.items()
        if not recipe.selects(module) and len(_shape(header, name)) > 1
    }
    return Kept(kept)


def _shape(header: GGUFHeader, name: str) -> tuple[int, ...]:
    return next(t.shape for t in header.tensors if t.name == name)


__all__ = ["Kept", "kept_tensors", "module_map", "safetensors_names"]
