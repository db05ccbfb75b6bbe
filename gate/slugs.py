"""The store slug of a model: one rule, below both the store and the models.

:func:`model_slug` names the directory of a model's baselines in the store
(``Org/Name-7B`` -> ``org--name-7b``). The baseline store derives the slug of an
external baseline with it and :class:`gate.models.model_spec.ModelSpec` its own, so
the rule sits here, where both may import it: the standard library and
:mod:`gate.errors` only.
"""

from __future__ import annotations

import re
from pathlib import Path

from gate.errors import BaselineError

#: The ``source`` that selects the packaged demo model (its slug is itself).
DEMO = "demo"

#: The file suffix of a GGUF model (compared case-insensitively).
GGUF_SUFFIX = ".gguf"

_SLUG_BAD = re.compile(r"[^a-z0-9._-]+")
#: Longest store slug (the store's directory-name rule allows 100 characters).
SLUG_MAX = 100


def is_gguf_path(text: str) -> bool:
    """Whether ``text`` names a ``.gguf`` file (by its suffix, case-insensitive)."""
    return text.strip().lower().endswith(GGUF_SUFFIX)


def model_slug(model: str) -> str:
    """The baseline-store slug of a model id or path: ``Org/Name-7B`` -> ``org--name-7b``.

    ``demo`` stays ``demo``. An existing directory, or a text that starts like a
    path (``.``, ``/``, ``~``), keeps only its last component (resolved, so
    ``.`` names the current directory); a hub id's ``/`` becomes ``--``. A
    ``.gguf`` file keeps its file name without that suffix, quant tag included
    (``SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``smollm2-135m-instruct.q4_1``), so
    two quantizations of one model get two slugs unless ``--model-slug`` names one. The
    result is lower-case, runs of characters outside ``[a-z0-9._-]`` become
    ``-``, leading and trailing ``-._`` are dropped and it is cut to
    :data:`SLUG_MAX` characters. A text with nothing left is a
    :class:`~gate.errors.BaselineError`.
    """
    text = model.strip()
    if text == DEMO:
        return DEMO
    path = Path(text).expanduser()
    if path.exists():
        text = path.resolve().name
    elif text.startswith((".", "/", "~")) or is_gguf_path(text):
        text = path.name
    if is_gguf_path(text):
        text = text[: -len(GGUF_SUFFIX)]
    slug = _SLUG_BAD.sub("-", text.lower().replace("/", "--")).strip("-._")[:SLUG_MAX]
    if not slug:
        raise BaselineError(f"cannot derive a baseline slug from {model!r}", "pass --model-slug")
    return slug


__all__ = ["DEMO", "GGUF_SUFFIX", "SLUG_MAX", "is_gguf_path", "model_slug"]
