"""Load a :class:`~gate.models.model_spec.ModelSpec` with a compression recipe into an :class:`HFBackend`.

Safety defaults: only safetensors weights are read unless the spec allows
pickle, and remote code runs only when the spec asks for it. Files are read
from disk only (``local_files_only``) for local directories and whenever
``HF_HUB_OFFLINE`` is set. Every failure becomes a one-line
:class:`~gate.errors.ModelLoadError` (exit 3) or, for a bad recipe,
:class:`~gate.errors.ConfigError` (exit 4).

Weights must match the architecture the config describes: tensors the model
needs but the checkpoint lacks (they would be freshly initialized), tensors
the checkpoint has but the model does not use, and tensors of another shape
refuse the model (exit 3) unless ``allow_incomplete_weights`` is set. A
corrupt or truncated weight file is a model-load error too, never a tier
failure.

A ``.gguf`` file loads through transformers' GGUF loader, dequantized
(``from_pretrained(directory, gguf_file=name)`` for the config, the tokenizer
and the model); its header is read first (:func:`gate.models.gguf.read_gguf`),
so an unreadable file or an architecture transformers cannot load fails in one
line before the weights load (exit 3), and a ``.gguf`` path that does not
exist is a usage error (exit 4).

Pre-quantized checkpoints (GPTQ, AWQ, compressed-tensors, FP8 ...) carry a
``quantization_config`` in ``config.json``; transformers picks the matching
quantizer itself. When that quantizer's kernel package is missing, the
``ImportError`` is turned into an error naming the package to install.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from gate.errors import ConfigError, GateError, ModelLoadError
from gate.models import gguf_parsing
from gate.models.activity import Activity, Counting, StackActivity
from gate.models.backends.hf import HFBackend
from gate.models.compress import applies_after_loading, apply_recipe, load_kwargs
from gate.models.compress.counting import quantized_checkpoint_layers
from gate.models.gguf import GGUFSummary, read_gguf
from gate.models.methods.base import CHECKPOINT, CHECKPOINT_LAYERS
from gate.models.methods.checkpoint import checkpoint_dir
from gate.models.methods.registry import get_method
from gate.models.model_spec import ModelSpec
from gate.models.precheck import check_gguf_recipe
from gate.models.recipes import Recipe, parse_recipe
from gate.models.stack import RecipeStack, parse_stack

if TYPE_CHECKING:
    from gate.models.backends.chunked import CacheBackend
    from gate.models.compress.kvcache import CacheMethod


#: Package to install for each ``quant_method`` of a pre-quantized checkpoint.
KERNEL_PACKAGES: dict[str, str] = {
    "gptq": "gptqmodel optimum",
    "awq": "gptqmodel",
    "compressed-tensors": "compressed-tensors",
    "compressed_tensors": "compressed-tensors",
    "fbgemm_fp8": "fbgemm-gpu",
    "fp8": "accelerate",
    "bitsandbytes": "bitsandbytes",
    "quanto": "optimum-quanto",
    "hqq": "hqq",
    "eetq": "eetq",
    "torchao": "torchao",
    "aqlm": "aqlm",
    "vptq": "vptq",
    "auto-round": "auto-round",
    "mxfp4": "kernels",
}

_PIP_RE = re.compile(r"pip install (?:-U |--upgrade )?([A-Za-z0-9_.\-]+(?:[<>=]=?[0-9.]+)?)")
_PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth")

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _device_map(spec: ModelSpec) -> str | dict[str, Any]:
    """accelerate's device map of ``spec.device``.

    ``auto`` with CUDA: ``"sequential"`` (GPU 0 while the model fits it, then the
    next GPUs; one GPU whenever the model fits one); ``auto`` without CUDA: the
    CPU. A CUDA device this machine lacks was refused before loading
    (:func:`gate.hw.devices.check_device`); a library caller that skipped that
    check gets the same rule as a :class:`ModelLoadError`.
    """
    from gate.hw.devices import check_device, resolve_device

    device = resolve_device(spec.device)
    if spec.device == "auto" and device == "cuda":
        return "sequential"
    try:
        check_device(device)
    except GateError as exc:
        raise ModelLoadError(exc.message, exc.hint) from None
    return {"": device}


def _check_pickle_only(directory: Path, spec: ModelSpec) -> None:
    has_safe = any(directory.glob("*.safetensors"))
    pickles = [n for n in _PICKLE_NAMES if (directory / n).is_file()]
    if not has_safe and pickles and not spec.allow_pickle:
        raise ModelLoadError(
            f"{directory} holds only pickle weights ({pickles[0]}), which can run code when loaded",
            "pass --allow-pickle if you trust the files, or convert them to safetensors",
        )
    if not has_safe and not pickles:
        raise ModelLoadError(
            f"no weight files (*.safetensors) in {directory}", "point at a saved model directory"
        )


def _quant_method(config: Any) -> str | None:
    qc = getattr(config, "quantization_config", None)
    if qc is None:
        return None
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    return str(getattr(method, "value", method)) if method is not None else "unknown"


def _import_error(exc: ImportError, method: str | None, source: str) -> ModelLoadError:
    found = _PIP_RE.search(str(exc))
    package = found.group(1) if found else KERNEL_PACKAGES.get(method or "")
    if package is None and getattr(exc, "name", None):
        package = str(exc.name).split(".")[0]
    what = f"its {method} quantization" if method else "it"
    return ModelLoadError(
        f"cannot load {source}: {what} needs a package that is missing ({_first_line(exc)})",
        f"pip install {package}" if package else "install the quantization kernels it needs",
    )


def _common_kwargs(spec: ModelSpec, local: Path | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code}
    gguf = spec.gguf_file
    if gguf is not None:
        kwargs["gguf_file"] = gguf.name
    if local is None:
        kwargs["revision"] = spec.revision
        kwargs["local_files_only"] = _offline()
    else:
        kwargs["local_files_only"] = True
    return kwargs


def _load_config(source: str, spec: ModelSpec, common: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, **common)
    except GateError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        message = str(exc)
        if "trust_remote_code" in message:
            raise ModelLoadError(
                f"{source} needs its own model code to load",
                "pass --trust-remote-code if you trust it",
            ) from None
        if common.get("local_files_only") and spec.local_dir is None:
            raise ModelLoadError(
                f"model {source} is neither a local directory nor in the Hugging Face cache"
                " (HF_HUB_OFFLINE is set)",
                "check the path, or download the model first",
            ) from None
        raise ModelLoadError(f"cannot read the config of {source}: {_first_line(exc)}") from None


#: Names shown per kind in the one-line refusal of incomplete weights.
_SHOWN_KEYS = 3
#: How to get past that refusal (the fix, or the explicit opt-in).
INCOMPLETE_WEIGHTS_HINT = (
    "fix config.json or the weight files; to measure it anyway pass --allow-incomplete-weights "
    "(gate run, gate baseline record) or set allow_incomplete_weights = true for the candidate"
)


@dataclass(frozen=True)
class WeightsReport:
    """What transformers found when matching the checkpoint's tensors to the model.

    ``missing``: the model has them, the checkpoint does not (they were freshly
    initialized). ``unexpected``: the checkpoint has them, the model does not
    use them. ``mismatched``: both have them, with different shapes.
    """

    missing: tuple[str, ...] = ()
    unexpected: tuple[str, ...] = ()
    mismatched: tuple[str, ...] = ()

    @classmethod
    def from_loading_info(cls, info: Mapping[str, Any] | None) -> WeightsReport:
        """From ``from_pretrained(..., output_loading_info=True)``'s dict (sets or lists)."""
        info = info or {}

        def names(key: str) -> tuple[str, ...]:
            raw = info.get(key) or ()
            return tuple(sorted(str(k[0] if isinstance(k, tuple) else k) for k in raw))

        return cls(names("missing_keys"), names("unexpected_keys"), names("mismatched_keys"))

    @property
    def complete(self) -> bool:
        """Every tensor of the model came from the checkpoint, and nothing was left over."""
        return not (self.missing or self.unexpected or self.mismatched)

    def summary(self) -> str:
        """``2 missing (a, b), 1 unexpected (c)``: counts with the first few names."""
        parts = []
        for kind, keys in (
            ("missing", self.missing),
            ("unexpected", self.unexpected),
            ("of another shape", self.mismatched),
        ):
            if keys:
                shown = ", ".join(keys[:_SHOWN_KEYS])
                more = ", ..." if len(keys) > _SHOWN_KEYS else ""
                parts.append(f"{len(keys)} {kind} ({shown}{more})")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Counts and names, for the backend's provenance."""
        return {
            "missing": list(self.missing),
            "unexpected": list(self.unexpected),
            "mismatched": list(self.mismatched),
        }


def _check_weights(source: str, report: WeightsReport, allow_incomplete: bool) -> None:
    if report.complete or allow_incomplete:
        return
    raise ModelLoadError(
        f"the weights of {source} do not match its config: tensors {report.summary()}",
        INCOMPLETE_WEIGHTS_HINT,
    )


class _NoLoadReport(logging.Filter):
    """Drops transformers' table of missing/unexpected tensors (:func:`_check_weights` names them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "LOAD REPORT" not in record.getMessage()


@contextlib.contextmanager
def _without_load_report() -> Iterator[None]:
    logger = logging.getLogger("transformers.modeling_utils")
    quiet = _NoLoadReport()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def _corrupt_weights(exc: BaseException) -> bool:
    """Whether ``exc`` is a weight file that cannot be parsed (truncated, bad header)."""
    return type(exc).__module__.startswith("safetensors") or "deserializ" in str(exc).lower()


def _load_model(
    source: str, spec: ModelSpec, recipe: Recipe, common: dict[str, Any], method: str | None
) -> tuple[Any, WeightsReport]:
    import transformers
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = dict(common)
    kwargs["use_safetensors"] = None if spec.allow_pickle or spec.is_gguf else True
    kwargs["device_map"] = _device_map(spec)
    dtype: Any = "auto" if spec.dtype == "auto" else _DTYPES[spec.dtype]
    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    kwargs["dtype" if (major, minor) >= (4, 56) else "torch_dtype"] = dtype
    kwargs.update(load_kwargs(recipe, _linear_names(source, common) if recipe.selective else ()))
    if spec.is_gguf:
        from transformers import GgufConfig

        # dequantized whatever kernels are installed: the gate measures a plain dense build
        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    # transformers reports missing/unexpected/mismatched tensors instead of raising;
    # _check_weights judges them (and names them in one line), so its log table is dropped.
    kwargs["output_loading_info"] = True
    kwargs["ignore_mismatched_sizes"] = True
    try:
        with _without_load_report():
            loaded: Any = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        model, info = loaded  # (model, loading info) with output_loading_info=True
        return model, WeightsReport.from_loading_info(info)
    except GateError:
        raise
    except ImportError as exc:
        raise _import_error(exc, method or _recipe_method(recipe), source) from None
    except Exception as exc:
        if _corrupt_weights(exc):
            raise ModelLoadError(
                f"cannot load {source}: a weight file is corrupt or truncated ({_first_line(exc)})",
                "copy or download the model again",
            ) from None
        if not isinstance(exc, (OSError, ValueError, RuntimeError, KeyError)):
            raise ModelLoadError(
                f"cannot load {source}: {type(exc).__name__}: {_first_line(exc)}"
            ) from None
        message = str(exc)
        no_safetensors = (
            "use_safetensors" in message or "no file named model.safetensors" in message
        )
        if no_safetensors and not spec.allow_pickle:
            raise ModelLoadError(
                f"{source} has no safetensors weights (only pickle files, which can run code)",
                "pass --allow-pickle if you trust the files",
            ) from None
        if "trust_remote_code" in message:
            raise ModelLoadError(
                f"{source} needs its own model code to load",
                "pass --trust-remote-code if you trust it",
            ) from None
        raise ModelLoadError(f"cannot load {source}: {_first_line(exc)}") from None


def _linear_names(source: str, common: dict[str, Any]) -> list[str]:
    """The linear modules of the model at ``source``, built on the meta device (no weights):
    a layer-selective load-time recipe (bnb) needs their names before loading."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from gate.models.compress.select import linear_names

    config = AutoConfig.from_pretrained(source, **common)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    return linear_names(skeleton)


def _recipe_method(recipe: Recipe) -> str | None:
    """The package a recipe that quantizes while loading needs (named when it fails to import)."""
    method = get_method(recipe.name)
    return method.requires.package if method.quantizes_while_loading and method.requires else None


def _load_tokenizer(source: str, common: dict[str, Any]) -> Any:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **common)
    except GateError:
        raise
    except ImportError as exc:
        raise _import_error(exc, None, source) from None
    except Exception as exc:  # a corrupt tokenizer file raises the tokenizers library's own type
        raise ModelLoadError(f"cannot load the tokenizer of {source}: {_first_line(exc)}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _hub_snapshot(source: str, revision: str | None) -> Path | None:
    """The local cache directory of a hub model, when it is cached."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, revision=revision, local_files_only=True))
    except Exception:  # a model loaded from the hub is normally cached; hashes are best-effort
        return None


def cache_method_of(recipe: Recipe) -> CacheMethod | None:
    """The KV-cache method of a ``kv-*`` recipe, checked before any model loads (else None).

    ``kv-quant`` needs optimum-quanto (transformers' quantized cache backend):
    when it is missing this is a :class:`ModelLoadError` (exit 3) naming the
    package.
    """
    method: CacheMethod | None = get_method(recipe.name).cache_method(recipe)
    return method


def load_candidate(
    spec: ModelSpec,
    recipe: Recipe | RecipeStack | str | None = None,
    *,
    calibration: list[str] | None = None,
    allow_incomplete_weights: bool = False,
    chunk_size: int | None = None,
) -> Any:
    """:func:`load_backend`, then wrapped so scoring and generation run the recipe's path.

    * a cache recipe (``kv-*``): a :class:`~gate.models.backends.chunked.CacheBackend`
      with the recipe's method: prefill through the compressed cache, then
      teacher forcing in chunks of ``chunk_size`` (None: the exact size, see
      :func:`~gate.models.backends.chunked.exact_chunk_size`), generation and
      timed generation through the cache;
    * ``attn-fp8`` / ``attn-sage``: the same wrapper with the identity cache and
      chunks of 1, so every call's scales are the ones generation computes;
    * a speculative recipe (``spec-*``): a
      :class:`~gate.models.backends.speculative.SpeculativeBackend` around the target;
    * anything else: the loaded backend as it is.

    A stack (``quanto-int4+kv-snapkv:0.5``, :mod:`gate.models.stack`) is made in
    its order: the model loaded with its weight part, the attention and test
    parts applied to it, then the cache wrapper and the drafter; its activity
    is a :class:`~gate.models.activity.StackActivity` of every part's own.

    A bad recipe or a model the method cannot run on fails here, before any
    tier runs (:class:`ConfigError`, exit 4; a missing package, exit 3).
    """
    stack = parse_stack(recipe)
    if not stack.composed and stack.part("speculative") is None:
        return _load_one(
            spec,
            stack.parts[0],
            calibration=calibration,
            allow_incomplete_weights=allow_incomplete_weights,
            chunk_size=chunk_size,
        )
    cache = stack.part("cache")
    method = cache_method_of(cache) if cache is not None else None
    backend = load_backend(
        spec,
        stack.weights,
        calibration=calibration,
        allow_incomplete_weights=allow_incomplete_weights,
    )
    activities = [backend.activity] if isinstance(backend.activity, Activity) else []
    for part in stack.on_loaded_model:
        activities.append(_applied_after_loading(backend, part))
    backend.recipe = stack
    backend.name = f"{spec.source}[{stack}]"
    top: Any = backend
    attention = stack.part("attention")
    if method is not None or (attention is not None and get_method(attention.name).per_call_scales):
        from gate.models.backends.chunked import CacheBackend
        from gate.models.compress.kvcache import CacheMethod

        label = str(cache if cache is not None else attention)
        top = CacheBackend(
            top, method or CacheMethod(), label=label, chunk_size=chunk_size if method else 1
        )
        if top.method_activity is not None:
            activities.append(top.method_activity)
    speculative = stack.part("speculative")
    if speculative is not None:
        top = _with_drafter(top, speculative, spec, backend, stack, allow_incomplete_weights)
        activities.append(top.drafting)
    if len(activities) > 1:
        top.activity = StackActivity(str(stack), tuple(activities))
    return top


def _with_drafter(
    top: Any,
    speculative: Recipe,
    spec: ModelSpec,
    backend: Any,
    stack: RecipeStack,
    allow_incomplete_weights: bool,
) -> Any:
    """``top`` wrapped in a :class:`~gate.models.backends.speculative.SpeculativeBackend`
    whose drafter the ``speculative`` recipe opens: a draft of the base model as loaded
    (no weight or after-loading part in the stack) starts from a copy of ``backend``,
    any other is loaded."""
    from gate.models.backends.speculative import SpeculativeBackend, open_drafter

    def load_draft(draft_spec: ModelSpec, draft_recipe: Recipe | None) -> HFBackend:
        untouched = stack.weights.control and not stack.on_loaded_model
        if (  # the target is the base model as loaded: its copy is the draft's start
            draft_spec == spec
            and untouched
            and draft_recipe is not None
            and applies_after_loading(draft_recipe)
        ):
            return copy_with_recipe(backend, draft_recipe)
        return load_backend(
            draft_spec, draft_recipe, allow_incomplete_weights=allow_incomplete_weights
        )

    return SpeculativeBackend(top, open_drafter(speculative, spec, backend, load_draft))


def copy_with_recipe(base: HFBackend, recipe: Recipe) -> HFBackend:
    """A copy of the loaded base model with ``recipe`` applied (a self-draft made without
    loading the weights again); its activity counts what the recipe changed in the copy."""
    import copy

    model = copy.deepcopy(base.model)
    with torch.no_grad():
        activity = apply_recipe(model, recipe)
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    draft = HFBackend(model, base.tokenizer, spec=base.spec, recipe=recipe)
    draft.activity = activity
    return draft


def _applied_after_loading(backend: HFBackend, recipe: Recipe) -> Activity:
    """``recipe`` (an attention or test part of a stack) applied to the loaded build; its
    activity (attention calls counted from now on, after the warm-up)."""
    with torch.no_grad():
        activity = apply_recipe(backend.model, recipe)
    if activity is None:  # only the control has none, and a stack refuses it
        raise ConfigError(f"recipe {recipe} cannot be stacked", "drop it from the stack")
    if activity.footprint.counting is Counting.PER_CALL:
        from gate.models.compress.attention import count_calls

        count_calls(backend.model, activity)
    return activity


def _load_one(
    spec: ModelSpec,
    recipe: Recipe,
    *,
    calibration: list[str] | None,
    allow_incomplete_weights: bool,
    chunk_size: int | None,
) -> HFBackend | CacheBackend:
    """One recipe, as :func:`load_candidate` describes."""
    method = cache_method_of(recipe)
    backend = load_backend(
        spec, recipe, calibration=calibration, allow_incomplete_weights=allow_incomplete_weights
    )
    # attention scales taken per call (attn-fp8, attn-sage) are scored one token per call, as
    # generation runs them (a one-pass score would take the scales over the whole text)
    if method is None and not get_method(recipe.name).per_call_scales:
        return backend
    from gate.models.backends.chunked import CacheBackend
    from gate.models.compress.kvcache import CacheMethod

    if method is None:
        return CacheBackend(backend, CacheMethod(), label=str(recipe), chunk_size=1)
    return CacheBackend(backend, method, label=str(recipe), chunk_size=chunk_size)


def load_backend(
    spec: ModelSpec,
    recipe: Recipe | str | None = None,
    *,
    calibration: list[str] | None = None,
    allow_incomplete_weights: bool = False,
) -> HFBackend:
    """Load ``spec`` with ``recipe`` applied and return a ready, eval-mode backend.

    ``calibration`` holds plain-text prompts for recipes that need activations
    (``prune-wanda``); they are tokenized without special tokens.
    ``allow_incomplete_weights`` measures a model whose checkpoint lacks tensors
    (freshly initialized), has unused ones or ones of another shape; by default
    that refuses the model (:class:`ModelLoadError`, exit 3). When allowed, the
    backend's provenance lists them under ``incomplete_weights``.
    """
    recipe = parse_recipe(recipe)
    definition = get_method(recipe.name)
    made = definition.load_made(spec, recipe, allow_incomplete_weights=allow_incomplete_weights)
    if made is not None:  # a method that builds a file and loads it (a gguf-* recipe)
        return cast(HFBackend, made)
    local = checkpoint_dir(spec, recipe) if definition.family is CHECKPOINT else spec.local_dir
    source = str(local) if local is not None else spec.source
    gguf: GGUFSummary | None = None
    if spec.gguf_file is not None:
        check_gguf_recipe(recipe)
        gguf = read_gguf(spec.gguf_file)
        gguf_parsing.install_gguf_parsing()
    elif local is not None:
        _check_pickle_only(local, spec)
    common = _common_kwargs(spec, local)
    config = _load_config(source, spec, common)
    method = _quant_method(config)
    if method is not None and definition.changes_weights:
        raise ConfigError(
            f"{spec.source} is already quantized ({method}); recipe {recipe} cannot be applied",
            "use --recipe none (or delay) for a pre-quantized checkpoint",
        )
    tokenizer = _load_tokenizer(source, common)
    model, weights = _load_model(source, spec, recipe, common, method)
    _check_weights(source, weights, allow_incomplete_weights)
    model.eval()
    tokens = None
    if definition.needs_calibration and calibration:
        tokens = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in calibration]
    with torch.no_grad():
        activity = apply_recipe(model, recipe, tokens)
    if activity is None and method is not None:  # a pre-quantized checkpoint given as the model
        activity = Activity(f"checkpoint:{method}", CHECKPOINT_LAYERS)
        activity.count(quantized_checkpoint_layers(model))
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    files_dir = local if local is not None else _hub_snapshot(spec.source, spec.revision)
    if gguf is not None:
        files_dir = None  # the file itself is hashed (``gguf``), not its directory
    backend = HFBackend(
        model,
        tokenizer,
        spec=spec,
        recipe=recipe,
        files_dir=files_dir,
        quant_method=method,
        incomplete_weights=None if weights.complete else weights.to_dict(),
        gguf=gguf,
    )
    if activity is not None and activity.footprint.counting is Counting.PER_CALL:
        from gate.models.compress.attention import count_calls

        count_calls(model, activity)  # after the warm-up: only the gate's requests count
    backend.activity = activity
    return backend


def load_tokenizer(spec: ModelSpec) -> tuple[Any, Any, Path | None]:
    """``(tokenizer, config, files directory)`` of ``spec``, without loading its weights.

    For backends that run the model elsewhere (a serving engine) but tokenize
    locally; the directory (None when unknown) is what provenance hashes.
    """
    local = spec.local_dir
    source = str(local) if local is not None else spec.source
    if spec.is_gguf:
        gguf_parsing.install_gguf_parsing()
    common = _common_kwargs(spec, local)
    config = _load_config(source, spec, common)
    tokenizer = _load_tokenizer(source, common)
    files_dir = local if local is not None else _hub_snapshot(spec.source, spec.revision)
    if spec.is_gguf:
        files_dir = None  # its directory may hold other models' files
    return tokenizer, config, files_dir
