"""What a GGUF file holds, tensor by tensor: the types llama-quantize actually wrote.

A recipe proves it acted by its output, not by what was asked: llama-quantize
picks a type per tensor from the file type and falls back where a tensor's
row length is not a multiple of the type's block (SmolLM2-135M's rows of 576
are not a multiple of 256, so most tensors of its Q2_K file are written Q4_0).
:func:`written_types` reads the header (:mod:`gate.models.gguf_header`, nothing
dequantized) and counts, per ggml type name, the tensors written in it, and how
many of them are in a quantized block type (:func:`~gate.engines.llama_cpp.types.is_quantized`).

The proof of a ``gguf-*`` recipe (:func:`acted`): for a quantizing type, the
tensors written in a quantized block type; for ``gguf-f16``/``gguf-bf16``, the
tensors written in that float type. Zero is NOT EXERCISED: the file is the
unquantized model under the recipe's name (e.g. every tensor fell back to F16).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gate.engines.llama_cpp.types import QuantType, is_quantized, type_name
from gate.errors import ModelLoadError
from gate.models.activity import Activity, Counting, Footprint
from gate.models.gguf_header import HeaderError, read_header


@dataclass(frozen=True)
class WrittenTypes:
    """The tensors of a GGUF file by written type: ``{name: ggml type name}`` and counts."""

    #: ``{tensor name: ggml type name}`` in file order.
    tensors: Mapping[str, str]
    #: Tensors written in a quantized block type.
    quantized: int

    @property
    def counts(self) -> dict[str, int]:
        """``{ggml type name: tensors}``, sorted by name (``{"F32": 61, "Q4_0": 180, ...}``)."""
        return dict(sorted(Counter(self.tensors.values()).items()))

    @property
    def total(self) -> int:
        """Every tensor of the file."""
        return len(self.tensors)

    def describe(self) -> str:
        """``180 of 272 tensors Q4_0, 61 F32, ...``: what was written, most common first."""
        ordered = sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))
        head, *rest = ordered
        return f"{head[1]} of {self.total} tensors {head[0]}" + "".join(
            f", {count} {name}" for name, count in rest
        )


def written_types(path: Path) -> WrittenTypes:
    """The :class:`WrittenTypes` of the GGUF file at ``path`` (exit 3 when it cannot be read)."""
    try:
        header = read_header(path)
    except (HeaderError, OSError) as exc:
        raise ModelLoadError(
            f"cannot read the GGUF llama.cpp wrote ({path.name}): {exc}",
            "delete it from gate's cache and run again",
        ) from None
    tensors = {t.name: type_name(t.ggml_type) for t in header.tensors}
    quantized = sum(is_quantized(t.ggml_type) for t in header.tensors)
    return WrittenTypes(tensors=tensors, quantized=quantized)


def acted(quant: QuantType, written: WrittenTypes) -> int:
    """The tensors that prove a ``gguf-*`` recipe acted (module doc)."""
    if quant.is_float:
        return sum(kind == quant.name for kind in written.tensors.values())
    return written.quantized


def footprint(quant: QuantType) -> Footprint:
    """What a ``gguf-*`` recipe counts (:func:`acted`), once, when its file is made."""
    unit = f"tensors written {quant.name}" if quant.is_float else "tensors written quantized"
    return Footprint(unit, Counting.AT_LOAD)


def activity(recipe: str, quant: QuantType, written: WrittenTypes) -> Activity:
    """The :class:`~gate.models.activity.Activity` of a made file: :func:`acted` counted."""
    found = Activity(recipe, footprint(quant))
    found.count(acted(quant, written))
    return found


__all__ = ["WrittenTypes", "acted", "activity", "footprint", "written_types"]
