"""The shape of one compression method, and the facts every method declares (no torch).

A compression method is one class (the shape of transformers' ``quantizers/``:
one ``HfQuantizer`` subclass per method, one mapping line in ``auto.py``). Its
instances are the catalogued recipe names (``quanto-int4`` is
``Quanto(bits=4)``), registered in :mod:`gate.models.methods.registry`. A method
declares, as fields:

* its name, one-line summary and the *kind* of its argument (a name of
  :data:`gate.models.recipes.ARG_KINDS`), with the words a ``choice`` takes and
  the keys a ``press`` takes;
* its :class:`Family` (what it acts on), which names its *slot* in a stack
  (weights / attention / KV cache / speculative decoder,
  :mod:`gate.models.stack`) and the selectors it may take (``keep=``/``only=``
  module globs or ``layers=`` indices);
* its :class:`~gate.models.activity.Footprint`: what it counts as having acted
  (only the control declares none);
* the package it needs (:class:`Requirement`: the one-line install hint);
* capabilities read by the planner, the loader and ``gate localize``: whether
  it quantizes while loading (``from_pretrained`` arguments), needs activation
  prompts, changes the weights, can be localized and repaired by ``keep=``,
  builds a file that an engine runs (its ``runtime``: llama.cpp for a ``gguf-*``
  file), takes its attention scales per call, needs full-attention layers (a KV
  press);
* the toolkit it stands for (:attr:`CompressionMethod.toolkit`) and that toolkit's syntax
  for leaving layers unquantized (:meth:`CompressionMethod.keep_syntax`), ``gate
  localize``'s snippets;

and, as methods, how it acts: :meth:`CompressionMethod.load_kwargs` (extra
``from_pretrained`` arguments), :meth:`CompressionMethod.apply` (an in-place
change of the loaded model that returns the units it finds changed),
:meth:`CompressionMethod.cache_method` (a KV-cache method's cache),
:meth:`CompressionMethod.precheck` (refuse, before anything loads, a build that
cannot run) and, for a method that builds a file and loads it,
:meth:`CompressionMethod.load_made` (the file made and loaded in process),
:meth:`CompressionMethod.check_runtime` and :meth:`CompressionMethod.open_in_runtime`
(the file served by its ``runtime`` engine). A method's torch code is imported inside those methods only, so
reading the catalogue never imports torch.

A method reads a parsed recipe through :class:`RecipeArgs` (its name, value and
selection), which :class:`gate.models.recipes.Recipe` satisfies; the method
modules therefore sit below the recipe parser that reads them.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from gate.errors import ConfigError, ModelLoadError
from gate.models.activity import Counting, Footprint

if TYPE_CHECKING:
    from gate.models.model_spec import ModelSpec

#: A parsed recipe argument. Numbers, a word, or ``(key, value)`` pairs, which keeps a
#: parsed recipe frozen and hashable.
RecipeValue = float | int | str | tuple[tuple[str, float | int | str], ...] | None

#: The activation prompts of a recipe that reads activations (Wanda): token id lists, one
#: per prompt, no padding. (Not ``gate calibrate``'s noise floor: a run config names
#: their file ``calibration``.)
ActivationPrompts = Sequence[Sequence[int]]


class RecipeArgs(Protocol):
    """What a method reads of a parsed recipe (:class:`gate.models.recipes.Recipe`)."""

    @property
    def name(self) -> str: ...

    @property
    def value(self) -> RecipeValue: ...

    @property
    def keep(self) -> tuple[str, ...]: ...

    @property
    def only(self) -> tuple[str, ...]: ...

    @property
    def layers(self) -> tuple[int, ...]: ...

    @property
    def selective(self) -> bool: ...

    @property
    def argument(self) -> str | None: ...

    def selects(self, module_name: str) -> bool: ...


def module_matches(glob: str, module_name: str) -> bool:
    """Whether ``glob`` names ``module_name`` or one of the modules that contain it.

    ``fnmatchcase`` on the name and on each of its dotted prefixes, so
    ``model.layers.0`` selects the whole block ``model.layers.0.*`` and
    ``model.layers.1*`` selects blocks 1, 10-19 (fnmatch's ``*`` crosses dots).
    """
    parts = module_name.split(".")
    return any(fnmatchcase(".".join(parts[:n]), glob) for n in range(1, len(parts) + 1))


def keyed(recipe: RecipeArgs) -> dict[str, float | int | str]:
    """The keyed values of a ``press``/``budget`` recipe as a dict (``{"ratio": 0.5}``)."""
    value = recipe.value
    if not isinstance(value, tuple):
        return {}
    return {key: v for key, v in value}


def number(recipe: RecipeArgs) -> float:
    """The numeric argument of a recipe (a fraction, a count, a duration in ms)."""
    value = recipe.value
    # parse_recipe guarantees a number for these recipes; this guards hand-built ones
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"recipe {recipe.name} needs a numeric argument", f"e.g. {recipe.name}:1")
    return float(value)


@dataclass(frozen=True)
class Family:
    """What a method acts on: its slot in a stack and the selectors it takes."""

    name: str
    description: str
    #: The stack slot (``weights``, ``attention``, ``cache``, ``speculative``; ``None``: none).
    slot: str | None
    #: The selector keys its recipes take (``keep``/``only`` globs, ``layers`` indices).
    selectors: tuple[str, ...] = ()
    #: What the suffix of its recipes' names names (``gguf-<type>``), for an unknown name's
    #: message; ``None``: its recipes are not named ``<family>-<member>``.
    members: str | None = None


WEIGHTS = Family("weights", "weights changed after loading", "weights", ("keep", "only"))
CHECKPOINT = Family("checkpoint", "a pre-quantized or sparse checkpoint loaded as it is", "weights")
ATTENTION = Family("attention", "the attention computation replaced", "attention", ("layers",))
CACHE = Family("cache", "the KV cache compressed during generation", "cache", ("layers",))
GGUF = Family(
    "gguf",
    "a GGUF file made with llama.cpp's converter and llama-quantize (docs/gguf.md)",
    "weights",
    ("keep", "only"),
    "llama.cpp quantization type",
)
SPECULATIVE = Family(
    "speculative",
    "speculative decoding: a drafter proposes, the build verifies (docs/speculative.md)",
    "speculative",
)
TEST = Family("test", "no compression (a test instrument)", None)

#: Every family, in the order the catalogue lists them.
FAMILIES: tuple[Family, ...] = (WEIGHTS, CHECKPOINT, ATTENTION, CACHE, GGUF, SPECULATIVE, TEST)

QUANTIZED = Footprint("linear modules quantized", Counting.AT_LOAD)
PRUNED = Footprint("linear modules pruned", Counting.AT_LOAD)
CHECKPOINT_LAYERS = Footprint("compressed layers loaded", Counting.AT_LOAD)
ATTENTION_CALLS = Footprint("attention calls replaced", Counting.PER_CALL)
EVICTED = Footprint("KV pairs evicted", Counting.PER_REQUEST)
#: A speculative decoder: draft tokens proposed, on generation only (teacher-forced scoring
#: runs the target alone; :mod:`gate.models.backends.speculative` counts them).
DRAFTED = Footprint("draft tokens proposed", Counting.PER_CALL, generation_only=True)


@dataclass(frozen=True)
class Requirement:
    """A package a method needs: the module it imports and the one-line install hint.

    ``eager_in_transformers``: transformers imports the package whenever it finds it
    installed, on every model load, whether or not a recipe uses it (hqq for its quantized
    cache: hqq's import pulls in torch's compiler, seconds per process; torchao for its
    quantizer, which prints warnings about its CUDA kernels on a CPU). gate's commands
    hide such a package from those look-ups (:meth:`hide`) and show it again to the one
    method that imports it (:meth:`installed` calls :meth:`show`): gate applies these
    methods through the packages' own APIs, never through transformers' integration.
    """

    module: str
    #: The distribution to install (``pip install <package>``).
    package: str
    eager_in_transformers: bool = False

    @property
    def hint(self) -> str:
        """The one-line install hint."""
        return f"pip install {self.package}"

    @property
    def top_module(self) -> str:
        """The top-level package of :attr:`module` (``optimum`` for ``optimum.quanto``)."""
        return self.module.partition(".")[0]

    def hide(self) -> None:
        """Make the package look absent to ``importlib.util.find_spec`` (a ``None`` entry in
        ``sys.modules``), unless it is imported already; :meth:`show` undoes it."""
        sys.modules.setdefault(self.top_module, None)  # type: ignore[arg-type]

    def show(self) -> None:
        """Undo :meth:`hide`: the package is found and imported as usual again."""
        if self.top_module in sys.modules and sys.modules[self.top_module] is None:
            del sys.modules[self.top_module]

    def installed(self) -> bool:
        """Whether the module is importable (found, not imported)."""
        self.show()
        top, _, rest = self.module.partition(".")
        if importlib.util.find_spec(top) is None:
            return False
        return not rest or importlib.util.find_spec(self.module) is not None

    def require(self, what: str, why: str = "") -> None:
        """Refuse ``what`` (``recipe kv-quant:int4``) when the package is missing (exit 3);
        ``why``: what the package does for it, in parentheses."""
        if not self.installed():
            reason = f" ({why})" if why else ""
            raise ModelLoadError(f"{what} needs {self.package}{reason}", self.hint)


@dataclass(frozen=True)
class CompressionMethod:
    """One catalogued compression method (module doc): its facts, and how it acts."""

    name: str
    summary: str
    family: Family
    #: What it counts as having acted (``None``: the control alone, which changes nothing).
    footprint: Footprint | None
    #: The kind of its argument (a name of :data:`gate.models.recipes.ARG_KINDS`).
    arg: str = "none"
    #: The words a ``choice`` argument accepts.
    choices: tuple[str, ...] = ()
    #: The keys a ``press`` argument accepts (``ratio`` first, required).
    press_keys: tuple[str, ...] = ("ratio",)
    #: Whether it needs activation prompts (it reads activations).
    needs_calibration: bool = False
    #: Whether it changes weights (it cannot run on a pre-quantized checkpoint).
    changes_weights: bool = True
    #: The package it needs (``None``: gate's own dependencies).
    requires: Requirement | None = None
    #: Why a recipe of a selecting family takes no selector (``None``: it takes its family's).
    not_selective: str | None = None
    #: Whether it quantizes while ``from_pretrained`` loads (it passes load arguments).
    quantizes_while_loading: bool = False
    #: Whether ``gate localize`` swaps its layers (weights changed layer by layer).
    localizable: bool = False
    #: The engine that runs the file it builds (``gate run --engine``'s spelling, declared in
    #: the engine's folder; ``None``: it builds no file an engine runs).
    runtime: str | None = None
    #: Attention scales taken from each call's tensors: scored one token per call.
    per_call_scales: bool = False
    #: Whether every decoder layer must be full attention (a KV press reads their queries).
    needs_full_attention: bool = False
    #: Whether it is the control: the unmodified model, what a build without a recipe is
    #: (``none``; it stacks with nothing and is the weights part a stack without one has).
    control: bool = False

    #: The toolkit whose own call its recipes stand for, the label of ``gate localize``'s
    #: snippet in that toolkit's syntax (:meth:`keep_syntax`; ``None``: no snippet). A fact
    #: of the class: every instance (``bnb-int8``, ``bnb-nf4``) shares it.
    toolkit: ClassVar[str | None] = None

    def keep_syntax(self, kept_names: Sequence[str], kept_indices: Sequence[int]) -> str:
        """The smallest change to :attr:`toolkit`'s usual call that leaves the kept decoder
        blocks in full precision (``gate localize``'s repair): ``kept_names`` as transformers
        names them (``model.layers.<i>``), ``kept_indices`` their indices."""
        raise NotImplementedError(f"{self.name} declares no toolkit")

    @property
    def repairable(self) -> bool:
        """Whether ``gate localize`` writes its repair as this recipe with ``keep=`` globs."""
        return self.localizable and "keep" in self.family.selectors and self.not_selective is None

    @property
    def selectors(self) -> tuple[str, ...]:
        """The selector keys its recipes take (none when it cannot act on a part)."""
        return () if self.not_selective is not None else self.family.selectors

    def load_kwargs(self, recipe: RecipeArgs, module_names: Sequence[str]) -> dict[str, Any]:
        """Extra ``from_pretrained`` keyword arguments; ``module_names``: the model's linear
        modules (known before loading for a layer-selective recipe only, else empty)."""
        return {}

    def apply(self, model: Any, recipe: RecipeArgs, prompts: ActivationPrompts | None) -> int:
        """Change the loaded ``model`` in place; the units found changed (its footprint's)."""
        return 0

    def cache_method(self, recipe: RecipeArgs) -> Any:
        """The :class:`~gate.models.compress.kvcache.CacheMethod` of a KV-cache method (else
        ``None``)."""
        return None

    def precheck(self, spec: ModelSpec, recipe: RecipeArgs) -> None:
        """Refuse, before anything loads, a build of ``spec`` this method cannot run."""

    def load_made(
        self, spec: ModelSpec, recipe: RecipeArgs, *, allow_incomplete_weights: bool
    ) -> Any:
        """A method that builds a file and loads it: the file made from ``spec`` and loaded
        in process (a backend); ``None``: the method is applied to the loaded model instead
        (:meth:`load_kwargs`, :meth:`apply`)."""
        return None

    def check_runtime(self, recipe: RecipeArgs) -> None:
        """Refuse, before anything starts, running ``recipe``'s file in :attr:`runtime`."""
        raise ConfigError(
            f"recipe {recipe.name!r} builds no file an engine runs",
            "drop --engine to run it in process",
        )

    def open_in_runtime(self, spec: ModelSpec, recipe: RecipeArgs, log_path: Any) -> Any:
        """The backend of ``recipe``'s file, made from ``spec`` and served by :attr:`runtime`
        (the server's log at ``log_path``); only a method with a :attr:`runtime` has one."""
        raise ConfigError(
            f"recipe {recipe.name!r} builds no file an engine runs",
            "drop --engine to run it in process",
        )


__all__ = [
    "ATTENTION",
    "ATTENTION_CALLS",
    "CACHE",
    "CHECKPOINT",
    "CHECKPOINT_LAYERS",
    "DRAFTED",
    "EVICTED",
    "FAMILIES",
    "GGUF",
    "PRUNED",
    "QUANTIZED",
    "SPECULATIVE",
    "TEST",
    "WEIGHTS",
    "ActivationPrompts",
    "CompressionMethod",
    "Family",
    "RecipeArgs",
    "RecipeValue",
    "Requirement",
    "keyed",
    "module_matches",
    "number",
]
