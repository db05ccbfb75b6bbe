"""The versioned baseline store (docs/contracts.md "Baselines store").

Layout under the store root (``./baselines`` by default)::

    <model-slug>/0001-fp16.json                    numbered, never overwritten
    <model-slug>/0001-fp16.reference-pack.npz      artifacts of baseline 1
    <model-slug>/refs.json                         {"refs": {"fp16": 1, "prod": 3, "prev-prod": 2}}

* A baseline file is created exclusively (:func:`gate.store.atomic.create_exclusive`):
  two writers racing for the same number cannot overwrite each other; the loser
  retries with the next number.
* ``refs.json`` is replaced atomically under an advisory lock; ``promote`` moves
  a ref and keeps the old target as ``prev-<ref>``.
* Artifacts are copied beside the JSON and their sha256 recorded in it; they are
  verified lazily when asked for (:meth:`Baseline.artifact_path`).
* Every problem with a baseline — missing, corrupt, truncated, newer schema,
  missing keys, unknown ref, a different tokenizer or model family — is a
  one-line :class:`~gate.errors.BaselineError` (exit 4).
"""

from __future__ import annotations

import builtins
import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gate.errors import BaselineError, DataError
from gate.measurement import Measurement
from gate.metrics.registry import suggest
from gate.models.spec import model_slug
from gate.provenance import sha256_file
from gate.store.atomic import copy_exclusive, create_exclusive, write_atomic
from gate.store.measurements_file import KIND as MEASUREMENTS_KIND
from gate.store.measurements_file import dump_json, parse_metrics, read_json
from gate.store.schema import check_schema_version

SCHEMA_VERSION = 1
KIND = "baseline"
REFS_FILE = "refs.json"
LOCK_FILE = ".refs.lock"

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
LABEL_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
REF_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
ARTIFACT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_BASELINE_FILE_RE = re.compile(r"^(\d{4,})-([a-z0-9][a-z0-9_-]*)\.json$")
_NUMBERED_RE = re.compile(r"^(\d{4,})-")
#: Keys every baseline JSON must have.
REQUIRED_KEYS = ("schema_version", "kind", "model_slug", "number", "label", "metrics")
_MAX_RACE_RETRIES = 1000


def _check_name(kind: str, value: str, pattern: re.Pattern[str], example: str) -> str:
    if not pattern.match(value):
        raise BaselineError(
            f"invalid {kind} {value!r}",
            f"use lower-case letters, digits, '-' or '_' (e.g. {example!r})",
        )
    return value


@dataclass(frozen=True)
class Baseline:
    """One stored baseline: its measurements, provenance and artifacts."""

    slug: str
    number: int
    label: str
    path: Path
    provenance: dict[str, Any]
    environment: dict[str, Any]
    measurements: dict[str, Measurement]
    #: artifact name -> {"file": file name beside the JSON, "sha256": hex digest}.
    artifacts: dict[str, dict[str, str]] = field(default_factory=dict)
    created: str = ""
    _verified: set[str] = field(default_factory=set, compare=False, repr=False)

    @property
    def display(self) -> str:
        """``slug#0003 (label)``, or the file path for an unnumbered baseline."""
        if self.number <= 0:
            return str(self.path)
        return f"{self.slug}#{self.number:04d} ({self.label})"

    def describe(self, ref: str | None = None) -> dict[str, Any]:
        """JSON-ready identity for reports (the ``baseline`` of the results JSON)."""
        return {
            "ref": ref,
            "model_slug": self.slug,
            "number": self.number,
            "label": self.label,
            "path": str(self.path),
            "created": self.created,
            "provenance": dict(self.provenance),
            "environment": dict(self.environment),
            "artifacts": {k: dict(v) for k, v in self.artifacts.items()},
        }

    def artifact_path(self, name: str) -> Path:
        """The verified path of artifact ``name``.

        Raises :class:`BaselineError` when the baseline has no such artifact,
        the file is missing, or its sha256 differs from the recorded one.
        """
        record = self.artifacts.get(name)
        if record is None:
            have = ", ".join(sorted(self.artifacts)) or "none"
            raise BaselineError(
                f"baseline {self.display} has no artifact {name!r} (it has: {have})",
                "record the baseline again with the tier that produces it",
            )
        path = self.path.parent / record["file"]
        if name in self._verified:
            return path
        if not path.is_file():
            raise BaselineError(
                f"artifact {name!r} of baseline {self.display} is missing ({path})",
                "restore the file or record the baseline again",
            )
        digest = sha256_file(path)
        if digest != record["sha256"]:
            raise BaselineError(
                f"artifact {name!r} of baseline {self.display} does not match its sha256",
                "the file was modified or truncated; restore it or record the baseline again",
            )
        self._verified.add(name)
        return path


def _require(data: Mapping[str, Any], path: Path) -> None:
    missing = [key for key in REQUIRED_KEYS if key not in data]
    if missing:
        raise BaselineError(
            f"baseline {path} lacks {', '.join(missing)}", "the file is corrupt; restore it"
        )


def _from_measurements_file(data: Mapping[str, Any], path: Path) -> Baseline:
    """A plain measurements file used as a baseline (no number, no artifacts)."""
    try:
        metrics = parse_metrics(data.get("metrics"), str(path))
    except DataError as exc:
        raise BaselineError(exc.message, exc.hint) from None
    model = data.get("model") or {}
    return Baseline(
        slug=model_slug(str(model.get("id") or model.get("path") or path.stem)),
        number=0,
        label=path.stem,
        path=path,
        provenance=dict(model) if isinstance(model, Mapping) else {},
        environment=dict(data.get("environment") or {}),
        measurements={m.name: m for m in metrics},
    )


def load_baseline_file(path: Path) -> Baseline:
    """Load a baseline JSON (or a measurements file used as one); problems -> BaselineError."""
    path = Path(path)
    try:
        data = read_json(path, BaselineError, what="baseline")
    except DataError as exc:
        raise BaselineError(exc.message, exc.hint) from None
    if not isinstance(data, Mapping):
        raise BaselineError(f"baseline {path} is not a JSON object", "the file is corrupt")
    check_schema_version(data, f"baseline {path}", reads_up_to=SCHEMA_VERSION, error=BaselineError)
    if data.get("kind") == MEASUREMENTS_KIND:
        return _from_measurements_file(data, path)
    _require(data, path)
    if data["kind"] != KIND:
        raise BaselineError(f"{path} is a {data['kind']!r} file, not a baseline", "pass a baseline")
    try:
        metrics = parse_metrics(data["metrics"], f"baseline {path}")
    except DataError as exc:
        raise BaselineError(exc.message, exc.hint) from None
    artifacts = data.get("artifacts") or {}
    try:
        artifact_records = {
            str(name): {"file": str(rec["file"]), "sha256": str(rec["sha256"])}
            for name, rec in artifacts.items()
        }
        number = int(data["number"])
    except (AttributeError, KeyError, TypeError, ValueError):
        raise BaselineError(
            f"baseline {path} has malformed number or artifacts", "the file is corrupt"
        ) from None
    return Baseline(
        slug=str(data["model_slug"]),
        number=number,
        label=str(data["label"]),
        path=path,
        provenance=dict(data.get("provenance") or {}),
        environment=dict(data.get("environment") or {}),
        measurements={m.name: m for m in metrics},
        artifacts=artifact_records,
        created=str(data.get("created", "")),
    )


def tokenizer_identity(provenance: Mapping[str, Any]) -> str | None:
    """The sha256 that identifies a model's vocabulary, when the provenance has one.

    ``tokenizer_sha256`` when given (measurements from other tools); else the
    digest of the vocabulary file among the backend's ``tokenizer_files``
    (``tokenizer.json``, or ``tokenizer.model`` for sentencepiece). Chat
    template files are deliberately not part of it.
    """
    explicit = provenance.get("tokenizer_sha256")
    if explicit:
        return str(explicit)
    files = provenance.get("tokenizer_files")
    if isinstance(files, Mapping):
        for name in ("tokenizer.json", "tokenizer.model"):
            if files.get(name):
                return str(files[name])
    return None


def check_compatible(baseline: Baseline, candidate_provenance: Mapping[str, Any]) -> None:
    """Refuse comparing a candidate with a baseline of another tokenizer or model family.

    Only what both sides record is compared (:func:`tokenizer_identity`,
    ``model_family``); a measurements file from another tool may lack both.
    """
    pairs = {
        "tokenizer": (
            tokenizer_identity(baseline.provenance),
            tokenizer_identity(candidate_provenance),
        ),
        "model_family": (
            baseline.provenance.get("model_family"),
            candidate_provenance.get("model_family"),
        ),
    }
    for key, (ours, theirs) in pairs.items():
        if ours is not None and theirs is not None and ours != theirs:
            raise BaselineError(
                f"baseline {baseline.display} has {key} {str(ours)[:16]!r} but the candidate "
                f"has {str(theirs)[:16]!r}",
                "a candidate must be compared with a baseline of the same model and tokenizer",
            )


def _artifact_suffix(source: Path) -> str:
    name = source.name
    for double in (".tar.gz", ".tar.zst"):
        if name.endswith(double):
            return double
    return source.suffix


class BaselineStore:
    """The append-only store of numbered baselines with named refs, rooted at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    # -- layout ---------------------------------------------------------------------------
    def model_dir(self, slug: str) -> Path:
        """Directory of one model's baselines."""
        return self.root / _check_name("model slug", slug, SLUG_RE, "llama-3.1-8b")

    def slugs(self) -> builtins.list[str]:
        """Model slugs that have a directory in the store."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and SLUG_RE.match(p.name))

    def _files(self, slug: str) -> Iterator[tuple[int, str, Path]]:
        directory = self.model_dir(slug)
        if not directory.is_dir():
            return
        for path in directory.iterdir():
            match = _BASELINE_FILE_RE.match(path.name)
            if match:
                yield int(match.group(1)), match.group(2), path

    def _next_number(self, directory: Path) -> int:
        numbers = [0]
        if directory.is_dir():
            for path in directory.iterdir():
                match = _NUMBERED_RE.match(path.name)
                if match:
                    numbers.append(int(match.group(1)))
        return max(numbers) + 1

    # -- writing --------------------------------------------------------------------------
    def add(
        self,
        model_slug: str,
        label: str,
        measurements: Sequence[Measurement],
        provenance: Mapping[str, Any],
        environment: Mapping[str, Any],
        artifacts: Mapping[str, Path] | None = None,
    ) -> Baseline:
        """Store a new numbered baseline (and copies of ``artifacts``); never overwrites."""
        directory = self.model_dir(model_slug)
        _check_name("label", label, LABEL_RE, "fp16")
        artifacts = dict(artifacts or {})
        for name, source in artifacts.items():
            _check_name("artifact name", name, ARTIFACT_RE, "reference-pack")
            if not Path(source).is_file():
                raise DataError(f"artifact {name!r} file {source} does not exist", "check the path")
        if not measurements:
            raise DataError("no measurements to store", "a baseline needs at least one metric")
        for measurement in measurements:
            measurement.validate()
        names = [m.name for m in measurements]
        if len(set(names)) != len(names):
            raise DataError("duplicate metric names in the measurements", "record each once")
        directory.mkdir(parents=True, exist_ok=True)
        number = self._next_number(directory)
        for _ in range(_MAX_RACE_RETRIES):
            stem = f"{number:04d}-{label}"
            written: builtins.list[Path] = []
            try:
                records: dict[str, dict[str, str]] = {}
                for name, source in sorted(artifacts.items()):
                    target = directory / f"{stem}.{name}{_artifact_suffix(Path(source))}"
                    copy_exclusive(Path(source), target)
                    written.append(target)
                    records[name] = {"file": target.name, "sha256": sha256_file(target)}
                payload = {
                    "schema_version": SCHEMA_VERSION,
                    "kind": KIND,
                    "model_slug": model_slug,
                    "number": number,
                    "label": label,
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "provenance": dict(provenance),
                    "environment": dict(environment),
                    "artifacts": records,
                    "metrics": [m.to_dict() for m in measurements],
                }
                path = directory / f"{stem}.json"
                create_exclusive(path, dump_json(payload))
            except FileExistsError:
                for done in written:
                    with contextlib.suppress(OSError):
                        done.unlink()
                number = max(number + 1, self._next_number(directory))
                continue
            return load_baseline_file(path)
        raise BaselineError(
            f"could not find a free baseline number in {directory}", "too many concurrent writers"
        )

    @contextlib.contextmanager
    def _locked(self, slug: str) -> Iterator[None]:
        directory = self.model_dir(slug)
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / LOCK_FILE).open("a") as handle:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - non-POSIX: atomic replace only
                yield
                return
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def promote(self, model_slug: str, ref: str, number: int) -> int | None:
        """Point ``ref`` at baseline ``number``; the old target (if any) becomes ``prev-<ref>``.

        Returns the old target. ``refs.json`` is replaced atomically, so a
        crash leaves either the old refs or the new ones.
        """
        _check_name("ref", ref, REF_RE, "prod")
        if ref == "latest":
            raise BaselineError("'latest' is reserved", "pick another ref name")
        self.get(model_slug, number)  # must exist and load
        with self._locked(model_slug):
            refs = self.refs(model_slug)
            old = refs.get(ref)
            if old is not None and old != number:
                refs[f"prev-{ref}"] = old
            refs[ref] = number
            payload = {"schema_version": SCHEMA_VERSION, "kind": "refs", "refs": refs}
            write_atomic(self.model_dir(model_slug) / REFS_FILE, dump_json(payload))
        return old

    # -- reading --------------------------------------------------------------------------
    def refs(self, model_slug: str) -> dict[str, int]:
        """Named refs of a model (empty when none were set)."""
        path = self.model_dir(model_slug) / REFS_FILE
        if not path.exists():
            return {}
        try:
            data = read_json(path, BaselineError)
        except DataError as exc:
            raise BaselineError(exc.message, exc.hint) from None
        if isinstance(data, Mapping):
            check_schema_version(
                data, str(path), reads_up_to=SCHEMA_VERSION, error=BaselineError, required=False
            )
        raw = data.get("refs") if isinstance(data, Mapping) else None
        if not isinstance(raw, Mapping) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in raw.values()
        ):
            raise BaselineError(f"{path} is malformed", "restore it from version control")
        return {str(k): int(v) for k, v in raw.items()}

    def list(self, model_slug: str | None = None) -> builtins.list[Baseline]:
        """Every baseline of one model (or of all models), ordered by slug and number."""
        slugs = [model_slug] if model_slug is not None else self.slugs()
        out: builtins.list[Baseline] = []
        for slug in slugs:
            for _, _, path in sorted(self._files(slug)):
                out.append(load_baseline_file(path))
        return out

    def get(self, model_slug: str, number: int) -> Baseline:
        """Baseline ``number`` of a model."""
        matches = [path for n, _, path in self._files(model_slug) if n == number]
        if not matches:
            raise BaselineError(
                f"baseline #{number:04d} of {model_slug!r} does not exist",
                "see `gate baseline list`",
            )
        return load_baseline_file(matches[0])

    def _pick_slug(self, model_slug: str | None) -> str:
        slugs = self.slugs()
        if model_slug is not None:
            if model_slug not in slugs:
                raise BaselineError(
                    f"no baselines for model {model_slug!r} in {self.root}",
                    suggest(model_slug, slugs) if slugs else "record one first",
                )
            return model_slug
        if len(slugs) == 1:
            return slugs[0]
        if not slugs:
            raise BaselineError(f"the baseline store {self.root} is empty", "record a baseline")
        raise BaselineError(
            f"the store {self.root} holds several models ({', '.join(slugs)})",
            "pass --model SLUG or write SLUG/REF",
        )

    def resolve(self, ref_or_path: str, model_slug: str | None = None) -> Baseline:
        """Find a baseline by file path, ``SLUG/REF``, ref, number, ``latest`` or label.

        Resolution order for a name: a named ref in ``refs.json``; a number
        (``3`` or ``0003``); ``latest``; the newest baseline with that label.
        """
        text = ref_or_path.strip()
        if Path(text).is_file():
            return load_baseline_file(Path(text))
        if text.endswith(".json"):
            raise BaselineError(f"baseline file {text} does not exist", "check the path")
        if text.count("/") == 1 and (self.root / text.split("/")[0]).is_dir():
            model_slug, text = text.split("/")
        slug = self._pick_slug(model_slug)
        files = sorted(self._files(slug))
        if not files:
            raise BaselineError(f"no baselines for model {slug!r}", "record one first")
        refs = self.refs(slug)
        if text in refs:
            return self.get(slug, refs[text])
        if text.isdigit():
            return self.get(slug, int(text))
        if text == "latest":
            return load_baseline_file(files[-1][2])
        labelled = [path for _, label, path in files if label == text]
        if labelled:
            return load_baseline_file(labelled[-1])
        choices = sorted({*refs, *(label for _, label, _ in files), "latest"})
        raise BaselineError(
            f"unknown baseline ref {text!r} for model {slug!r}", suggest(text, choices)
        )
