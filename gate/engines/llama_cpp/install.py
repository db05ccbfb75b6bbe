"""Where llama.cpp is built: the one declaration of its directory's name, and the tools in it.

``bash scripts/setup_engine.sh llama.cpp`` (``scripts/setup_llama_cpp.sh``)
builds llama.cpp once per build number and flavour into gate's engine cache::

    ${GATE_ENGINE_CACHE:-~/.cache/gate-engines}/llama.cpp-b<build>-<flavour>-<arch>
        bin/llama-server  bin/llama-quantize  bin/llama-perplexity  bin/llama-imatrix
        src/convert_hf_to_gguf.py  src/gguf-py/  convert-deps/  build.json

(:func:`install_dir` spells that name; ``tests/test_llama_cpp_recipes.py``
checks the script builds the same one). ``GATE_LLAMA_CPP_DIR`` names another
directory of that layout. The flavour searched is ``cuda`` then ``cpu``
(``GATE_LLAMA_CPP_FLAVOUR`` picks one). A directory counts as built when the
script's completion stamp is there and the programs run; otherwise every
caller gets one line naming the command that builds it
(:class:`~gate.errors.ConfigError`, exit 4).

The build number is the ``build`` of ``build.json`` (``b11434``): the sdist has
no git metadata, so the script takes it from the package version.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from gate.errors import ConfigError

#: The llama.cpp build gate is tested with (the set-up script's default version).
BUILD = "b11434"
#: Flavours the set-up script builds, in the order they are looked for.
FLAVOURS: tuple[str, ...] = ("cuda", "cpu")
#: Environment variable naming a built llama.cpp directory (overrides the search).
DIR_ENV = "GATE_LLAMA_CPP_DIR"
#: Environment variables of the engine cache and of the flavour (the set-up script's too).
CACHE_ENV = "GATE_ENGINE_CACHE"
FLAVOUR_ENV = "GATE_LLAMA_CPP_FLAVOUR"
#: The file the set-up script writes last: a finished build.
STAMP = ".gate-engine-complete"
#: The command that builds llama.cpp (named in every refusal).
SETUP_COMMAND = "bash scripts/setup_engine.sh llama.cpp"
#: The engine's name as gate's options and provenance spell it.
ENGINE = "llama.cpp"


def engine_cache() -> Path:
    """``$GATE_ENGINE_CACHE``, else ``~/.cache/gate-engines``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "gate-engines")


def install_dir(flavour: str, build: str = BUILD, cache: Path | None = None) -> Path:
    """``<cache>/llama.cpp-<build>-<flavour>-<arch>``: where the set-up script builds llama.cpp."""
    root = engine_cache() if cache is None else cache
    return root / f"llama.cpp-{build}-{flavour}-{platform.machine()}"


@dataclass(frozen=True)
class LlamaCpp:
    """A built llama.cpp: its directory, build number and flavour, and the paths gate runs."""

    root: Path
    build: str
    flavour: str

    @property
    def server(self) -> Path:
        """``bin/llama-server``."""
        return self.root / "bin" / "llama-server"

    @property
    def quantize(self) -> Path:
        """``bin/llama-quantize``."""
        return self.root / "bin" / "llama-quantize"

    @property
    def converter(self) -> Path:
        """``src/convert_hf_to_gguf.py``: llama.cpp's own Hugging Face to GGUF converter."""
        return self.root / "src" / "convert_hf_to_gguf.py"

    def tool_env(self) -> dict[str, str]:
        """What a llama.cpp program runs with: ``bin/`` first on ``LD_LIBRARY_PATH``, where the
        set-up script puts the shared libraries the programs link (``libllama.so``, the tools'
        ``-impl`` libraries), whatever run path the build wrote into them."""
        found = os.environ.get("LD_LIBRARY_PATH")
        libraries = str(self.root / "bin") + (os.pathsep + found if found else "")
        return {"LD_LIBRARY_PATH": libraries}

    def converter_path(self) -> str:
        """The ``PYTHONPATH`` the converter runs with: llama.cpp's own ``gguf-py`` first (never
        gate's ``gguf`` release), then what the set-up script installed for it."""
        return os.pathsep.join(
            str(p) for p in (self.root / "src" / "gguf-py", self.root / "convert-deps")
        )


def _read(root: Path) -> LlamaCpp | None:
    """The built llama.cpp in ``root``, or ``None`` when it is not a finished build."""
    if not (root / STAMP).is_file():
        return None
    try:
        facts = json.loads((root / "build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    found = LlamaCpp(root, str(facts.get("build") or ""), str(facts.get("flavour") or ""))
    tools = (found.server, found.quantize, found.converter)
    if not found.build or not all(p.is_file() for p in tools):
        return None
    return found


def find_llama_cpp() -> LlamaCpp | None:
    """The built llama.cpp gate uses (module doc), or ``None`` when none is built."""
    named = os.environ.get(DIR_ENV)
    if named:
        return _read(Path(named).expanduser())
    wanted = os.environ.get(FLAVOUR_ENV)
    for flavour in (wanted,) if wanted else FLAVOURS:
        found = _read(install_dir(flavour))
        if found is not None:
            return found
    return None


def require(what: str = "this recipe") -> LlamaCpp:
    """The built llama.cpp, or one line naming the command that builds it (exit 4)."""
    found = find_llama_cpp()
    if found is not None:
        return found
    named = os.environ.get(DIR_ENV)
    where = (
        f"{DIR_ENV}={named} holds no finished build"
        if named
        else (f"llama.cpp {BUILD} is not built in {engine_cache()}")
    )
    raise ConfigError(f"{what} needs llama.cpp: {where}", f"build it once: {SETUP_COMMAND}")


__all__ = [
    "BUILD",
    "DIR_ENV",
    "ENGINE",
    "FLAVOURS",
    "SETUP_COMMAND",
    "LlamaCpp",
    "engine_cache",
    "find_llama_cpp",
    "install_dir",
    "require",
]
