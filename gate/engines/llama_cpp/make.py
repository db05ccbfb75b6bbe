"""Make a ``gguf-*`` recipe's file: llama.cpp's converter, then llama-quantize, cached by content.

Made from the weights of the model the recipe is applied to (its Hugging Face
directory: a local directory, the demo model, a cached hub snapshot; for a
``.gguf`` model, such as ``smollm2``, the safetensors copy gate already makes of
it, :func:`gate.models.gguf.dequantized_dir`):

1. **convert** — ``python src/convert_hf_to_gguf.py DIR --outtype f16 --outfile X``
   with gate's own interpreter and ``PYTHONPATH`` set to llama.cpp's ``gguf-py``
   and the converter's dependencies (:meth:`LlamaCpp.converter_path
   <gate.engines.llama_cpp.install.LlamaCpp.converter_path>`), in a child process,
   so llama.cpp's ``gguf`` never shadows gate's; ``gguf-f16``/``gguf-bf16`` are
   this step alone (``--outtype bf16``);
2. **quantize** — ``llama-quantize [--tensor-type ...] F16.gguf OUT.gguf TYPE THREADS``
   (the overrides of a ``keep=``/``only=`` selection, :mod:`gate.engines.llama_cpp.select`).

A converter that refuses the model (an architecture or a pre-tokenizer it does
not know) is one line with the converter's own reason (exit 4). A type that
needs an importance matrix is refused before anything runs
(:data:`~gate.engines.llama_cpp.types.NEEDS_IMATRIX`, exit 4).

**Cache.** Under ``<gate's cache>/gguf/`` (:func:`gate.cache.cache_root`):
the converted file is keyed by the model's weight and tokenizer file digests,
the llama.cpp build and the outtype; the made file by those, the type and the
recipe's selection (its canonical text). A key is the first 16 hex digits of
SHA-256 over those facts, one per line. Each is written into a staging
directory beside its final name and renamed into place, with ``made.json``
(the facts, the written tensor types, the file's sha256) written last: a file
is reused only when its ``made.json`` is there, never half made. What a recipe
wrote is read from the file's header (:mod:`gate.engines.llama_cpp.written`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gate import progress
from gate.cache import cache_root
from gate.engines.llama_cpp.install import ENGINE, LlamaCpp, require
from gate.engines.llama_cpp.select import kept_tensors
from gate.engines.llama_cpp.types import QuantType, quant_type, refuse_imatrix
from gate.engines.llama_cpp.written import WrittenTypes, acted, written_types
from gate.errors import ConfigError, ModelLoadError
from gate.models.gguf_header import read_header
from gate.models.methods.registry import get_method
from gate.models.model_spec import ModelSpec
from gate.models.recipes import Recipe, format_recipe, parse_recipe, selector_text

#: The file of facts written last into a made directory.
MADE = "made.json"
#: The type the converter writes before llama-quantize runs.
CONVERTED_TYPE = "f16"
#: Lines of a failing tool's output quoted in its one-line error.
_QUOTE = 300


def gguf_cache() -> Path:
    """``<gate's cache>/gguf``: where made GGUF files live."""
    return cache_root() / "gguf"


@dataclass(frozen=True)
class MadeGGUF:
    """A made ``gguf-*`` file and what it holds."""

    path: Path
    sha256: str
    #: The canonical recipe it was made for (``gguf-q4_k_m:keep=model.layers.0.*``).
    recipe: str
    quant: QuantType
    build: str
    written: WrittenTypes
    #: Whether it came from the cache (nothing was run).
    reused: bool = False

    @property
    def acted(self) -> int:
        """The tensors that prove the recipe acted (:func:`~gate.engines.llama_cpp.written.acted`)."""
        return acted(self.quant, self.written)

    def facts(self, runtime: str) -> dict[str, Any]:
        """Provenance facts of the build: the file, what it holds, and what ran it
        (``runtime``: ``llama.cpp``, or ``dequantized`` for transformers in process)."""
        facts: dict[str, Any] = {
            "recipe": self.recipe,
            "gguf_sha256": self.sha256,
            "gguf_tensor_types": self.written.counts,
            "gguf_runtime": runtime,
            "gguf_made_with": f"{ENGINE} {self.build}",
        }
        if runtime == ENGINE:
            facts["engine"] = ENGINE
            facts["engine_version"] = self.build
        return facts


def source_dir(spec: ModelSpec) -> Path:
    """The Hugging Face directory a ``gguf-*`` file is made from (module doc)."""
    gguf = spec.gguf_file
    if gguf is not None:
        from gate.models.gguf import dequantized_dir

        with progress.task(f"{gguf.name}: its safetensors copy (made once, in gate's cache)", None):
            return dequantized_dir(gguf)
    local = spec.local_dir
    if local is not None:
        return local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec.source, revision=spec.revision, local_files_only=True))
    except Exception:  # not in the hub cache: nothing is downloaded here
        raise ConfigError(
            f"a gguf-* recipe is made from the weights of {spec.source}, which are not on this"
            " machine",
            "download the model first (huggingface-cli download) or give its directory",
        ) from None


def model_digest(directory: Path) -> str:
    """SHA-256 over the digests of the directory's weight, config and tokenizer files."""
    from gate.models.provenance import combined_digest, hash_files, tokenizer_files, weight_files

    return combined_digest(hash_files([*weight_files(directory), *tokenizer_files(directory)]))


def _key(*facts: str) -> str:
    return hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]


def _run(argv: Sequence[str], what: str, env: Mapping[str, str] | None, log: Path) -> str:
    """Run a llama.cpp tool, its output to ``log``; its text, or a one-line error."""
    with log.open("wb") as out:
        done = subprocess.run(
            list(argv), stdout=out, stderr=subprocess.STDOUT, env=env, check=False
        )
    text = log.read_text(encoding="utf-8", errors="replace")
    if done.returncode != 0:
        raise ToolFailed(what, done.returncode, text)
    return text


class ToolFailed(Exception):
    """A llama.cpp tool exited non-zero (turned into a one-line error by its caller)."""

    def __init__(self, what: str, code: int, output: str) -> None:
        super().__init__(f"{what} exited {code}")
        self.what, self.code, self.output = what, code, output


def converter_reason(output: str) -> str:
    """The converter's own reason for refusing a model, from its output.

    The exception line that ends a traceback (``NotImplementedError: BPE
    pre-tokenizer was not recognized ...``), else its last ``ERROR:`` log line
    (``Model FooForCausalLM is not supported``), else its last line.
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return "no output"
    if "Traceback (most recent call last):" in output:
        return lines[-1][:_QUOTE]
    errors = [line for line in lines if line.startswith("ERROR:")]
    if errors:
        return errors[-1].split(":", 2)[-1].strip()[:_QUOTE]
    return lines[-1][:_QUOTE]


def _publish(staging: Path, target: Path) -> None:
    try:
        staging.rename(target)
    except OSError:  # another process made it first
        if not (target / MADE).is_file():
            raise


def _converted(directory: Path, digest: str, llama: LlamaCpp, outtype: str, cache: Path) -> Path:
    """The converter's ``outtype`` GGUF of ``directory``, made once (module doc)."""
    target = cache / f"converted-{_key(digest, llama.build, outtype)}"
    path = target / f"model-{outtype}.gguf"
    if (target / MADE).is_file() and path.is_file():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache))
    try:
        env = {**os.environ, "PYTHONPATH": llama.converter_path()}
        argv = [sys.executable, str(llama.converter), str(directory)]
        argv += ["--outtype", outtype, "--outfile", str(staging / path.name)]
        with progress.task(
            f"llama.cpp {llama.build}: converting {directory.name} to GGUF {outtype}", None
        ):
            try:
                _run(argv, "the converter", env, staging / "convert.log")
            except ToolFailed as exc:
                raise ConfigError(
                    f"llama.cpp's converter refuses {directory.name}: {converter_reason(exc.output)}",
                    "a gguf-* recipe needs a model llama.cpp converts; gate a GGUF file of the"
                    " model as the model instead, docs/gguf.md",
                ) from None
        facts = {"source": str(directory), "model_digest": digest, "build": llama.build}
        (staging / MADE).write_text(json.dumps({**facts, "outtype": outtype}, indent=2) + "\n")
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def make_gguf(
    spec: ModelSpec,
    recipe: Recipe | str,
    *,
    llama: LlamaCpp | None = None,
    cache: Path | None = None,
) -> MadeGGUF:
    """The file of ``gguf-*`` ``recipe`` made from ``spec``'s weights (made once, then reused)."""
    recipe = parse_recipe(recipe)
    if get_method(recipe.name).runtime != ENGINE:
        raise ConfigError(f"recipe {recipe} does not make a GGUF file", "use a gguf-* recipe")
    refuse_imatrix(recipe.name)
    quant = quant_type(recipe.name)
    llama = require(f"recipe {recipe}") if llama is None else llama
    cache = gguf_cache() if cache is None else cache
    directory = source_dir(spec)
    digest = model_digest(directory)
    target = cache / _key(digest, llama.build, quant.name, selector_text(recipe))
    name = f"{recipe.name}.gguf"
    if (target / MADE).is_file() and (target / name).is_file():
        return _made(target / name, recipe, quant, llama, reused=True)
    if quant.is_float:
        converted = _converted(directory, digest, llama, quant.name.lower(), cache)
        kept_args: list[str] = []
    else:
        converted = _converted(directory, digest, llama, CONVERTED_TYPE, cache)
        kept_args = kept_tensors(recipe, read_header(converted), directory).arguments()
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache))
    try:
        if quant.is_float:
            shutil.copyfile(converted, staging / name)
            command: list[str] = []
        else:
            threads = str(os.cpu_count() or 1)
            command = [str(llama.quantize), *kept_args, str(converted), str(staging / name)]
            command += [quant.name, threads]
            with progress.task(f"llama-quantize {llama.build}: {quant.name}", None):
                try:
                    env = {**os.environ, **llama.tool_env()}
                    _run(command, "llama-quantize", env, staging / "quantize.log")
                except ToolFailed as exc:
                    tail = converter_reason(exc.output)
                    raise ModelLoadError(
                        f"llama-quantize could not make {recipe}: {tail}",
                        f"its log: run {' '.join(command[:1])} by hand on {converted}",
                    ) from None
        record = {
            "recipe": format_recipe(recipe),
            "type": quant.name,
            "build": llama.build,
            "model_digest": digest,
            "source": str(directory),
            "quantize_command": command,
        }
        (staging / MADE).write_text(json.dumps(record, indent=2) + "\n")
        _publish(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return _made(target / name, recipe, quant, llama, reused=False)


def _made(
    path: Path, recipe: Recipe, quant: QuantType, llama: LlamaCpp, *, reused: bool
) -> MadeGGUF:
    from gate.provenance import sha256_file

    return MadeGGUF(
        path=path,
        sha256=sha256_file(path),
        recipe=format_recipe(recipe),
        quant=quant,
        build=llama.build,
        written=written_types(path),
        reused=reused,
    )


__all__ = [
    "CONVERTED_TYPE",
    "MADE",
    "MadeGGUF",
    "converter_reason",
    "gguf_cache",
    "make_gguf",
    "model_digest",
    "source_dir",
]
