"""The registry of compression methods: one line per method module, plus out-of-tree methods.

The built-in methods are listed in :data:`BUILT_IN`, one line per module, in
catalogue order (the order ``--help``, the did-you-mean and the docs list them).
A method that lives outside gate is a :class:`~gate.models.methods.base.CompressionMethod`
(or a sequence of them) published under the entry-point group :data:`ENTRY_POINTS`
(``[project.entry-points."gate.methods"]``, as vLLM registers out-of-tree
quantization methods); it is read the first time the registry is (a name that
is already taken is refused, exit 4). Reading the registry imports no torch: a
method's torch code is imported when it acts.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib.metadata import entry_points

from gate.errors import ConfigError
from gate.models.methods import (
    attention,
    bnb,
    checkpoint,
    control,
    delay,
    drop_layers,
    hqq,
    kvcache,
    prune,
    quanto,
    speculative,
    torchao,
)
from gate.models.methods.base import FAMILIES, GGUF, CompressionMethod, Family

#: The entry-point group of out-of-tree methods.
ENTRY_POINTS = "gate.methods"

#: The built-in methods, one line per method module, in catalogue order.
BUILT_IN: tuple[CompressionMethod, ...] = (
    *control.METHODS,
    *bnb.METHODS,
    *quanto.METHODS,
    *torchao.METHODS,
    *hqq.METHODS,
    *prune.METHODS,
    *drop_layers.METHODS,
    *delay.METHODS,
    *checkpoint.METHODS,
    *attention.METHODS,
    *kvcache.METHODS,
    *speculative.METHODS,
)


def _published() -> Iterable[CompressionMethod]:
    """The methods of the :data:`ENTRY_POINTS` group (each entry a method or a sequence)."""
    for entry in entry_points(group=ENTRY_POINTS):
        loaded = entry.load()
        found = loaded if isinstance(loaded, (tuple, list)) else (loaded,)
        for method in found:
            if not isinstance(method, CompressionMethod):
                raise ConfigError(
                    f"entry point {entry.name} of {ENTRY_POINTS} is not a CompressionMethod",
                    "publish instances of gate.models.methods.base.CompressionMethod",
                )
            yield method


@cache
def methods() -> Mapping[str, CompressionMethod]:
    """Every method by recipe name: the built-in ones, then the published ones."""
    found: dict[str, CompressionMethod] = {}
    for method in (*BUILT_IN, *_published()):
        if method.name in found:
            raise ConfigError(
                f"compression method {method.name!r} is registered twice",
                f"rename the out-of-tree method published under {ENTRY_POINTS}",
            )
        found[method.name] = method
    return found


def hide_eager_kernels() -> None:
    """Hide the built-in methods' packages that transformers imports on every model load
    (:attr:`Requirement.eager_in_transformers`: seconds of import and warnings per process
    for a recipe that does not use them); each method shows its own again when it acts.
    Called once as a command starts (:mod:`gate.commands`), before anything imports
    transformers; published methods are not read here (an entry point that fails to load
    is reported where a recipe names it, never at start-up)."""
    for method in BUILT_IN:
        if method.requires is not None and method.requires.eager_in_transformers:
            method.requires.hide()


def method_names() -> list[str]:
    """Every recipe name, in catalogue order."""
    return list(methods())


def runtimes() -> tuple[str, ...]:
    """The engines that run a file a method builds (``gate run --engine``'s choices), in
    catalogue order."""
    return tuple(dict.fromkeys(m.runtime for m in methods().values() if m.runtime is not None))


def families() -> tuple[Family, ...]:
    """Every family: gate's own, then any an out-of-tree method brings."""
    return tuple(dict.fromkeys((*FAMILIES, *(m.family for m in methods().values()))))


def get_method(name: str) -> CompressionMethod:
    """The method of a recipe name; unknown names get a did-you-mean (exit 4)."""
    known = methods()
    found = known.get(name)
    if found is not None:
        return found
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}?" if close else f"known: {', '.join(known)}"
    family = next(
        (f for f in families() if f.members is not None and name.startswith(f"{f.name}-")), None
    )
    if family is not None:  # an unknown member of a family that names them (a gguf-* type)
        types = ", ".join(m.name for m in known.values() if m.family is family)
        what = f"unknown {family.members} {name.removeprefix(f'{family.name}-')!r}"
        raise ConfigError(f"{what} (recipe {name!r})", f"{hint} known: {types}")
    raise ConfigError(f"unknown recipe {name!r}", hint)


def catalogue_table() -> str:
    """The markdown table of every method (docs/compression-families.md quotes it; a test
    checks the quote): one row per method, ``gguf-*`` types folded into one row."""
    rows = ["| recipe | family (slot) | argument | counts | needs |", "|---|---|---|---|---|"]
    gguf_done = False
    for method in methods().values():
        if method.family is GGUF:
            if gguf_done:
                continue
            gguf_done = True
            name = f"`{GGUF.name}-<type>` (docs/gguf.md)"
        else:
            name = f"`{method.name}`"
        slot = method.family.slot or "none"
        counts = method.footprint.unit if method.footprint is not None else "nothing (the control)"
        needs = method.requires.package if method.requires is not None else "-"
        rows.append(
            f"| {name} | {method.family.name} ({slot}) | {method.arg} | {counts} | {needs} |"
        )
    return "\n".join(rows) + "\n"


__all__ = [
    "BUILT_IN",
    "ENTRY_POINTS",
    "catalogue_table",
    "families",
    "get_method",
    "hide_eager_kernels",
    "method_names",
    "methods",
    "runtimes",
]
