"""What model to load: :class:`ModelSpec` (its store slug by :func:`gate.slugs.model_slug`).

A ``ModelSpec`` is frozen and validated where it is built, so code downstream
never sees a bad dtype or device. It names a Hugging Face id, a local
directory, a packaged real model by name (``smollm2``, :mod:`gate.models.packaged`),
a local ``.gguf`` file (loaded dequantized by transformers'
GGUF loader, docs/gguf.md), or ``demo`` (the model packaged under
``gate/assets/demo_model``).
How the model is compressed at load time is a :class:`~gate.models.recipes.Recipe`.
Nothing here imports torch: config validation uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from gate.errors import ConfigError, ModelLoadError
from gate.models.packaged import PackagedModel, packaged_model
from gate.slugs import DEMO, is_gguf_path, model_slug

DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16", "float16")

#: A device name: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
DEVICE_RE = re.compile(r"^(cpu|auto|cuda(:\d+)?)$")
#: The device of a model when nothing names one: the GPU when CUDA is present, else the CPU.
DEFAULT_DEVICE = "auto"
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def check_device_name(device: str) -> str:
    """``device`` when it names a device (:data:`DEVICE_RE`); else ``ValueError`` saying so.

    The one check of a device name: the command line, ``gate.toml``'s ``device`` keys, a
    judge's ``device`` and :class:`ModelSpec` all call it, each turning the ``ValueError``
    into its own error. Whether the device exists here is
    :func:`gate.hw.devices.check_device`'s question, asked only before a model loads.
    """
    if not DEVICE_RE.match(device):
        raise ValueError(f"unknown device {device!r}: choose auto, cpu, cuda or cuda:N")
    return device


def demo_model_dir() -> Path:
    """Directory of the packaged demo model (it may be absent in a partial checkout)."""
    return Path(str(resources.files("gate").joinpath("assets", "demo_model")))


@dataclass(frozen=True)
class ModelSpec:
    """Where a model comes from and how it is placed.

    ``device`` is ``cpu``, ``cuda`` (GPU 0), ``cuda:N`` or ``auto`` (the default,
    :data:`DEFAULT_DEVICE`); ``auto`` is
    the GPU when torch sees CUDA, placed with accelerate's sequential device map
    (GPU 0 while the model fits it, then the next GPUs), and the CPU when it sees
    none (:func:`gate.hw.devices.resolve_device`). ``dtype`` ``auto`` keeps the
    checkpoint's own dtype.
    """

    source: str
    revision: str | None = None
    dtype: str = "auto"
    device: str = DEFAULT_DEVICE
    trust_remote_code: bool = False
    allow_pickle: bool = False

    def __post_init__(self) -> None:
        if not self.source or not self.source.strip():
            raise ConfigError("empty model name", "give a Hugging Face id, a directory or 'demo'")
        if self.dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {self.dtype!r}", f"choose one of {', '.join(DTYPES)}")
        try:
            check_device_name(self.device)
        except ValueError as error:
            raise ConfigError(str(error), "pass --device auto, cpu, cuda or cuda:N") from None

    @classmethod
    def parse(cls, text: str, **opts: Any) -> ModelSpec:
        """Build a spec from ``demo``, a directory or a hub id (``org/name[@revision]``)."""
        source = text.strip()
        revision = opts.pop("revision", None)
        if "@" in source and not Path(source).exists():
            source, _, rev = source.partition("@")
            revision = revision or rev or None
        unknown = set(opts) - {"dtype", "device", "trust_remote_code", "allow_pickle"}
        if unknown:
            raise ConfigError(f"unknown model option(s): {', '.join(sorted(unknown))}")
        return cls(source=source, revision=revision, **opts)

    @property
    def is_demo(self) -> bool:
        """Whether this is the packaged demo model."""
        return self.source == DEMO

    @property
    def packaged(self) -> PackagedModel | None:
        """The packaged real model this source names (``smollm2``), unless a path of that
        name exists here (:mod:`gate.models.packaged`)."""
        found = packaged_model(self.source)
        if found is None or Path(self.source).expanduser().exists():
            return None
        return found

    @property
    def is_gguf(self) -> bool:
        """Whether the source names a ``.gguf`` file (case-insensitive suffix) or a packaged
        model that is one."""
        packaged = self.packaged
        if packaged is not None:
            return is_gguf_path(packaged.filename)
        return is_gguf_path(self.source)

    @property
    def gguf_file(self) -> Path | None:
        """The ``.gguf`` file to load, or ``None`` when the source is not one.

        A ``.gguf`` path that is not an existing file is a
        :class:`~gate.errors.ConfigError` (exit 4): the user gave a wrong path.
        """
        if not self.is_gguf:
            return None
        packaged = self.packaged
        if packaged is not None:
            return packaged.path()  # a missing package: ConfigError naming the install
        path = Path(self.source).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"model file {self.source} does not exist",
                "check the path to the .gguf file",
            )
        return path.resolve()

    @property
    def local_dir(self) -> Path | None:
        """The local directory to load from, or ``None`` for a hub id.

        For a ``.gguf`` file, the directory holding it (see :attr:`gguf_file`).
        A path that looks local but does not exist is a :class:`~gate.errors.ConfigError`
        (exit 4: the user typed a wrong path); a path that exists but is not a model
        directory (a file) is a :class:`ModelLoadError` (exit 3), as is anything that
        fails once loading starts.
        """
        gguf = self.gguf_file
        if gguf is not None:
            return gguf.parent
        if self.is_demo:
            path = demo_model_dir()
            if not (path / "config.json").is_file():
                raise ModelLoadError(
                    "the demo model is not packaged in this install (gate/assets/demo_model)",
                    "reinstall gate: the demo model ships as package data",
                )
            return path
        path = Path(self.source).expanduser()
        if path.exists():
            if not path.is_dir():
                raise ModelLoadError(
                    f"model path {self.source} is a file", "give the directory holding config.json"
                )
            return path
        looks_local = self.source.startswith((".", "/", "~")) or self.source.count("/") > 1
        if looks_local or not _HUB_ID_RE.match(self.source):
            raise ConfigError(
                f"model directory {self.source} does not exist",
                "check the path, or give a Hugging Face id such as org/name",
            )
        return None

    @property
    def slug(self) -> str:
        """Directory name of this model's baselines (:func:`gate.slugs.model_slug` of its source)."""
        return model_slug(self.source)
