"""Which modules a layer-selective weight recipe compresses (``keep=`` / ``only=`` globs).

A weight recipe compresses a set of *candidate* modules (the linear layers it
would change without a selection: every ``nn.Linear`` but ``lm_head`` for the
quantizers, the linears inside the decoder blocks for pruning). A selection
narrows it: a candidate ``m`` is compressed when ``only`` is empty or one
``only`` glob matches ``m``, and no ``keep`` glob matches ``m``
(:meth:`~gate.models.recipes.Recipe.selects`; a glob matches a module or a
module that contains it). Every glob must match at least one candidate: a
glob that matches none is a typo or a name from another architecture, and it
is refused (:class:`~gate.errors.ConfigError`, exit 4) instead of compressing
the whole model silently.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from gate.errors import ConfigError
from gate.models.methods.base import RecipeArgs, module_matches


def linear_names(model: nn.Module, exclude: Sequence[str] = ()) -> list[str]:
    """Names of the ``nn.Linear`` modules of ``model``, minus those ``exclude`` matches."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not any(module_matches(glob, name) for glob in exclude)
    ]


def check_globs(recipe: RecipeArgs, candidates: Sequence[str]) -> None:
    """Refuse a ``keep``/``only`` glob of ``recipe`` that matches none of ``candidates``."""
    for key, globs in (("keep", recipe.keep), ("only", recipe.only)):
        for glob in globs:
            if not any(module_matches(glob, name) for name in candidates):
                example = candidates[0] if candidates else "no module"
                raise ConfigError(
                    f"{recipe}: {key}={glob} matches none of the"
                    f" {len(candidates)} modules {recipe.name} compresses",
                    f"name modules as the model does, e.g. {example}"
                    " (gate localize lists the layers)",
                )


def selected(recipe: RecipeArgs, candidates: Sequence[str]) -> list[str]:
    """The candidates ``recipe`` compresses (every one without a selection); globs checked."""
    check_globs(recipe, candidates)
    chosen = [name for name in candidates if recipe.selects(name)]
    if recipe.selective and not chosen:
        raise ConfigError(
            f"{recipe} leaves no module to compress",
            "narrow keep= or widen only=",
        )
    return chosen


__all__ = ["check_globs", "linear_names", "selected"]
