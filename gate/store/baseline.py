"""The versioned baseline store (docs/contracts.md "Baselines store").

Layout under the store root (``./baselines`` by default)::

    <model-slug>/0001-fp16.json                    numbered, never overwritten
    <model-slug>/0001-fp16.reference-pack.npz      artifacts of baseline 1
    <model-slug>/refs.json                         {"refs": {"fp16": 1, "prod": 3, "prev-prod": 2}}
    <model-slug>/.lock                             advisory lock of every writer

* Every write to a model's directory (``add``, ``promote``) holds the
  directory's lock (:func:`gate.store.atomic.file_lock`, with a timeout), so
  "pick the next number, publish, move the refs" is one step: concurrent
  writers get distinct, contiguous numbers whatever their labels.
* A baseline and its artifacts are published as one unit: everything is staged
  as temp files first, the artifacts are published, and the baseline JSON is
  published last (:func:`gate.store.atomic.publish_exclusive`) — it is the
  commit point. Numbers come from baseline JSON files only, so a writer killed
  before the commit leaves no used number, only leftovers (temp files, artifacts
  of the uncommitted number) that the next writer removes with a warning.
  Readers never see them (they read baseline JSON files only).
* ``refs.json`` is replaced atomically in the same locked step; ``promote``
  moves a ref and keeps the old target as ``prev-<ref>``. A ref only ever
  names a committed baseline.
* Every argument is checked before anything is written; a failed write (read-only
  store, full disk, no permission) is a one-line :class:`~gate.errors.BaselineError`
  naming the store and the cause, and leaves the store as it was.
* Artifacts are copied beside the JSON and their sha256 recorded in it; they are
  verified lazily when asked for (:meth:`Baseline.artifact_path`).
* Every problem with a baseline — missing, corrupt, truncated, newer schema,
  missing keys, a number or label that contradicts its file name, two files
  claiming one number, a metric this gate does not know, unknown ref, a
  different tokenizer or model family — is a one-line
  :class:`~gate.errors.BaselineError` (exit 4).
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gate.errors import BaselineError, ConfigError, DataError
from gate.measurement import Measurement
from gate.metrics.registry import all_metrics, suggest
from gate.provenance import ModelProvenance, sha256_file, tokenizers_differ
from gate.slugs import model_slug
from gate.store.atomic import (
    LockTimeout,
    file_lock,
    is_temporary,
    publish_exclusive,
    stage,
    write_atomic,
)
from gate.store.measurements_file import KIND as MEASUREMENTS_KIND
from gate.store.measurements_file import dump_json, parse_metrics, read_json
from gate.store.schema import check_schema_version

SCHEMA_VERSION = 1
KIND = "baseline"
REFS_FILE = "refs.json"
LOCK_FILE = ".lock"
#: Seconds a writer waits for another writer of the same model before giving up.
LOCK_TIMEOUT_S = 120.0

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")
LABEL_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
REF_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
ARTIFACT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_BASELINE_FILE_RE = re.compile(r"^(\d{4,})-([a-z0-9][a-z0-9_-]*)\.json$")
_NUMBERED_RE = re.compile(r"^(\d{4,})-")
#: Keys every baseline JSON must have.
REQUIRED_KEYS = ("schema_version", "kind", "model_slug", "number", "label", "metrics")
_MAX_RACE_RETRIES = 100


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
    provenance: ModelProvenance
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
        """JSON-ready identity for reports (the ``baseline`` of the results JSON); ``sha256``
        is the digest of the baseline's file (the store never rewrites one), by which
        ``gate merge`` tells two stored baselines apart whatever their paths."""
        return {
            "ref": ref,
            "model_slug": self.slug,
            "number": self.number,
            "label": self.label,
            "path": str(self.path),
            "sha256": sha256_file(self.path) if self.path.is_file() else None,
            "created": self.created,
            "provenance": self.provenance.to_document(),
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


def _check_known_metrics(names: Iterable[str], path: Path) -> None:
    """Refuse a baseline holding a metric the registry does not know (it could never be gated)."""
    known = all_metrics()
    for name in names:
        if name not in known:
            raise BaselineError(
                f"baseline {path} has unknown metric {name!r}",
                f"{suggest(name, list(known))} (written by a newer gate? upgrade it; "
                "else restore the file)",
            )


def _check_file_name(path: Path, number: int, label: str) -> None:
    """A stored baseline's number and label must be the ones its file name carries."""
    match = _BASELINE_FILE_RE.match(path.name)
    if match is None:
        return
    named = (int(match.group(1)), match.group(2))
    if named != (number, label):
        raise BaselineError(
            f"baseline {path} says #{number:04d} ({label}) but its file name says "
            f"#{named[0]:04d} ({named[1]})",
            "the store is inconsistent; restore the file (gate never renumbers a baseline)",
        )


def _from_measurements_file(data: Mapping[str, Any], path: Path) -> Baseline:
    """A plain measurements file used as a baseline (no number, no artifacts)."""
    try:
        metrics = parse_metrics(data.get("metrics"), str(path))
    except DataError as exc:
        raise BaselineError(exc.message, exc.hint) from None
    _check_known_metrics((m.name for m in metrics), path)
    model = data.get("model") or {}
    return Baseline(
        slug=model_slug(str(model.get("id") or model.get("path") or path.stem)),
        number=0,
        label=path.stem,
        path=path,
        provenance=ModelProvenance.from_document(model if isinstance(model, Mapping) else {}),
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
    _check_file_name(path, number, str(data["label"]))
    _check_known_metrics((m.name for m in metrics), path)
    return Baseline(
        slug=str(data["model_slug"]),
        number=number,
        label=str(data["label"]),
        path=path,
        provenance=ModelProvenance.from_document(_mapping(data.get("provenance"))),
        environment=dict(data.get("environment") or {}),
        measurements={m.name: m for m in metrics},
        artifacts=artifact_records,
        created=str(data.get("created", "")),
    )


def check_compatible(baseline: Baseline, candidate: ModelProvenance) -> None:
    """Refuse comparing a candidate with a baseline of another tokenizer or model family.

    Only what both sides record is compared (the tokenizer by
    :meth:`~gate.provenance.ModelProvenance.tokenizer_identity`, the one rule the
    reference pack's check uses too, the vocabulary digest
    ``tokenizer_vocab_sha256``, which a GGUF file and the Hugging Face files of
    the same model share, and ``model_family``); a measurements file from
    another tool may lack them all.
    """
    check_same_model(baseline.display, baseline.provenance, candidate)


def check_same_model(display: str, ours: ModelProvenance, theirs: ModelProvenance) -> None:
    """:func:`check_compatible` of the baseline named ``display`` that records ``ours``."""
    checks: tuple[tuple[str, str | None, str | None, Callable[[str | None, str | None], bool]], ...]
    checks = (
        ("tokenizer", ours.tokenizer_identity(), theirs.tokenizer_identity(), tokenizers_differ),
        (
            "tokenizer vocabulary",
            ours.tokenizer_vocab_sha256,
            theirs.tokenizer_vocab_sha256,
            _differ,
        ),
        ("model_family", ours.model_family, theirs.model_family, _differ),
    )
    for key, mine, other, differ in checks:
        if differ(mine, other):
            raise BaselineError(
                f"baseline {display} has {key} {str(mine)[:16]!r} but the candidate "
                f"has {str(other)[:16]!r}",
                "a candidate must be compared with a baseline of the same model and tokenizer",
            )


def _differ(ours: str | None, theirs: str | None) -> bool:
    return ours is not None and theirs is not None and ours != theirs


def _mapping(value: Any) -> Mapping[str, Any]:
    """A document's object, or an empty one (a missing or null ``provenance``)."""
    return value if isinstance(value, Mapping) else {}


def _artifact_suffix(source: Path) -> str:
    name = source.name
    for double in (".tar.gz", ".tar.zst"):
        if name.endswith(double):
            return double
    return source.suffix


def _check_ref(ref: str) -> str:
    _check_name("ref", ref, REF_RE, "prod")
    if ref == "latest":
        raise BaselineError("'latest' is reserved", "pick another ref name")
    return ref


def check_names(*, label: str, refs: Sequence[str] = (), model_slug: str | None = None) -> None:
    """Refuse a bad label, ref or model slug (one-line :class:`BaselineError`) before any work."""
    if model_slug is not None:
        _check_name("model slug", model_slug, SLUG_RE, "llama-3.1-8b")
    _check_name("label", label, LABEL_RE, "fp16")
    for ref in refs:
        _check_ref(ref)


def _stderr_warning(message: str) -> None:
    sys.stderr.write(f"gate: warning: {message}\n")


def _write_problem(root: Path, exc: OSError) -> BaselineError:
    """A failed store write as one line naming the store, the file and the cause."""
    cause = exc.strerror or type(exc).__name__
    where = f" ({exc.filename})" if exc.filename else ""
    hints = {
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "no permission to write there",
        errno.EPERM: "no permission to write there",
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is exhausted",
        errno.EFBIG: "a file-size limit was hit",
    }
    first = hints.get(exc.errno or 0, "the store cannot be written")
    return BaselineError(
        f"cannot write to the baseline store {root}: {cause}{where}",
        f"{first}: fix that, or pass --store DIR on a writable disk; nothing was stored",
    )


@dataclass(frozen=True)
class _StoreFile:
    """A numbered baseline JSON in a model directory, as its name says."""

    number: int
    label: str
    path: Path


class BaselineStore:
    """The append-only store of numbered baselines with named refs, rooted at ``root``.

    ``lock_timeout`` bounds how long a writer waits for another writer of the
    same model; ``warn`` receives one-line warnings (leftovers removed), by
    default printed to stderr.
    """

    def __init__(
        self,
        root: Path,
        *,
        lock_timeout: float = LOCK_TIMEOUT_S,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.lock_timeout = lock_timeout
        self.warn = warn or _stderr_warning

    # -- layout ---------------------------------------------------------------------------
    def model_dir(self, slug: str) -> Path:
        """Directory of one model's baselines."""
        return self.root / _check_name("model slug", slug, SLUG_RE, "llama-3.1-8b")

    def slugs(self) -> builtins.list[str]:
        """Model slugs with at least one baseline in the store.

        A directory left without baselines (a first add that failed to write)
        does not count as a model.
        """
        if not self.root.is_dir():
            return []
        return sorted(
            p.name
            for p in self.root.iterdir()
            if p.is_dir()
            and SLUG_RE.match(p.name)
            and any(_BASELINE_FILE_RE.match(f.name) for f in p.iterdir())
        )

    def _scan(self, slug: str) -> builtins.list[_StoreFile]:
        """The baseline files of a model, by number; two files claiming one number are refused."""
        directory = self.model_dir(slug)
        if not directory.is_dir():
            return []
        files: dict[int, _StoreFile] = {}
        for path in sorted(directory.iterdir()):
            match = _BASELINE_FILE_RE.match(path.name)
            if match is None:
                continue
            found = _StoreFile(int(match.group(1)), match.group(2), path)
            other = files.get(found.number)
            if other is not None:
                raise BaselineError(
                    f"two baseline files claim #{found.number:04d} in {directory}: "
                    f"{other.path.name} and {path.name}",
                    "the store is inconsistent; keep the right one and move the other away",
                )
            files[found.number] = found
        return [files[n] for n in sorted(files)]

    def _files(self, slug: str) -> Iterator[tuple[int, str, Path]]:
        for item in self._scan(slug):
            yield item.number, item.label, item.path

    def _next_number(self, directory: Path) -> int:
        """One past the highest committed baseline number (artifacts and leftovers do not count)."""
        return max((item.number for item in self._scan(directory.name)), default=0) + 1

    # -- writing --------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Refuse early (one-line :class:`BaselineError`) when the store cannot be written.

        Creates and removes a probe file in the store, or in its nearest existing
        parent when the store does not exist yet (nothing is created then).
        """
        directory = self.root
        while not directory.exists() and directory.parent != directory:
            directory = directory.parent
        if not directory.is_dir():
            raise BaselineError(
                f"the baseline store {self.root} is not a directory ({directory} is a file)",
                "pass --store DIR",
            )
        try:
            probe = stage(directory / ".gate-write-probe", b"")
            probe.unlink()
        except OSError as exc:
            raise _write_problem(self.root, exc) from None

    @contextlib.contextmanager
    def _writing(self, slug: str) -> Iterator[Path]:
        """Create and lock the model's directory for the block; OSError -> one-line BaselineError.

        Inside the block, leftovers of an interrupted writer are already removed.
        """
        directory = self.model_dir(slug)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            with file_lock(directory / LOCK_FILE, timeout=self.lock_timeout):
                self._remove_leftovers(directory)
                yield directory
        except LockTimeout:
            raise BaselineError(
                f"the baseline store {directory} is still locked by another writer after "
                f"{self.lock_timeout:g} s",
                "another `gate baseline add/promote/record` is writing there; retry when it ends",
            ) from None
        except OSError as exc:
            raise _write_problem(self.root, exc) from None

    def _remove_leftovers(self, directory: Path) -> None:
        """Remove what an interrupted writer left: temp files and files of uncommitted numbers.

        Called with the lock held, so no live writer owns them: every writer
        stages and publishes under the lock, and the baseline JSON (the commit
        point) is published last.
        """
        highest = max((item.number for item in self._scan(directory.name)), default=0)
        leftovers = []
        for path in sorted(directory.iterdir()):
            if _BASELINE_FILE_RE.match(path.name) or not path.is_file():
                continue  # a baseline JSON is committed by definition; never removed
            numbered = _NUMBERED_RE.match(path.name)
            if is_temporary(path.name) or (numbered and int(numbered.group(1)) > highest):
                leftovers.append(path)
        for path in leftovers:
            path.unlink()
        if leftovers:
            names = ", ".join(p.name for p in leftovers[:4])
            more = f" and {len(leftovers) - 4} more" if len(leftovers) > 4 else ""
            self.warn(
                f"removed {len(leftovers)} leftover file(s) of an interrupted store write "
                f"in {directory}: {names}{more}"
            )

    def add(
        self,
        model_slug: str,
        label: str,
        measurements: Sequence[Measurement],
        provenance: ModelProvenance,
        environment: Mapping[str, Any],
        artifacts: Mapping[str, Path] | None = None,
        refs: Sequence[str] = (),
    ) -> Baseline:
        """Store a new numbered baseline with copies of ``artifacts``; point ``refs`` at it.

        Every argument is checked before anything is written. The number,
        the files and the refs are written in one locked step; the baseline
        JSON is published last, so an interruption leaves no used number.
        """
        check_names(label=label, refs=refs, model_slug=model_slug)
        artifacts = dict(artifacts or {})
        for name, source in artifacts.items():
            _check_name("artifact name", name, ARTIFACT_RE, "reference-pack")
            if not Path(source).is_file():
                raise DataError(f"artifact {name!r} file {source} does not exist", "check the path")
        if not measurements:
            raise DataError("no measurements to store", "a baseline needs at least one metric")
        known = all_metrics()
        for measurement in measurements:
            measurement.validate()
            if measurement.name not in known:
                raise ConfigError(
                    f"unknown metric {measurement.name!r}", suggest(measurement.name, list(known))
                )
        names = [m.name for m in measurements]
        if len(set(names)) != len(names):
            raise DataError("duplicate metric names in the measurements", "record each once")
        dump_json({"provenance": provenance.to_document(), "environment": dict(environment)})

        with self._writing(model_slug) as directory:
            if refs:
                self.refs(model_slug)  # a malformed refs.json stops the add before it writes
            path = self._publish(
                directory, model_slug, label, measurements, provenance, environment, artifacts
            )
            stored = load_baseline_file(path)
            if refs:
                self._move_refs(model_slug, {ref: stored.number for ref in refs})
        return stored

    def _publish(
        self,
        directory: Path,
        model_slug: str,
        label: str,
        measurements: Sequence[Measurement],
        provenance: ModelProvenance,
        environment: Mapping[str, Any],
        artifacts: Mapping[str, Path],
    ) -> Path:
        """Stage the artifacts and the JSON, publish the artifacts, then the JSON (lock held)."""
        for _ in range(_MAX_RACE_RETRIES):
            number = self._next_number(directory)
            stem = f"{number:04d}-{label}"
            staged: builtins.list[Path] = []
            published: builtins.list[Path] = []
            committed = False
            try:
                records: dict[str, dict[str, str]] = {}
                finals: builtins.list[tuple[Path, Path]] = []
                for name, source in sorted(artifacts.items()):
                    target = directory / f"{stem}.{name}{_artifact_suffix(Path(source))}"
                    tmp = stage(target, Path(source))
                    staged.append(tmp)
                    finals.append((tmp, target))
                    records[name] = {"file": target.name, "sha256": sha256_file(tmp)}
                payload = {
                    "schema_version": SCHEMA_VERSION,
                    "kind": KIND,
                    "model_slug": model_slug,
                    "number": number,
                    "label": label,
                    "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "provenance": provenance.to_document(),
                    "environment": dict(environment),
                    "artifacts": records,
                    "metrics": [m.to_dict() for m in measurements],
                }
                path = directory / f"{stem}.json"
                json_tmp = stage(path, dump_json(payload))
                staged.append(json_tmp)
                for tmp, target in finals:
                    publish_exclusive(tmp, target)
                    published.append(target)
                publish_exclusive(json_tmp, path)  # the commit point
                committed = True
                return path
            except FileExistsError:
                continue  # a writer that does not lock took the number: take the next one
            finally:
                for leftover in staged + ([] if committed else published):
                    with contextlib.suppress(OSError):
                        os.unlink(leftover)
        raise BaselineError(
            f"could not find a free baseline number in {directory}",
            "something else keeps creating numbered files there",
        )

    def _move_refs(self, model_slug: str, moves: Mapping[str, int]) -> dict[str, int | None]:
        """Point each ref at its number, keeping an old target as ``prev-<ref>`` (lock held)."""
        refs = self.refs(model_slug)
        old: dict[str, int | None] = {}
        for ref, number in moves.items():
            old[ref] = refs.get(ref)
            previous = old[ref]
            if previous is not None and previous != number:
                refs[f"prev-{ref}"] = previous
            refs[ref] = number
        payload = {"schema_version": SCHEMA_VERSION, "kind": "refs", "refs": refs}
        write_atomic(self.model_dir(model_slug) / REFS_FILE, dump_json(payload))
        return old

    def promote(self, model_slug: str, ref: str, number: int) -> int | None:
        """Point ``ref`` at baseline ``number``; the old target (if any) becomes ``prev-<ref>``.

        Returns the old target. The baseline must load and its artifacts match
        their sha256. ``refs.json`` is replaced atomically, so a crash leaves
        either the old refs or the new ones.
        """
        _check_ref(ref)
        target = self.get(model_slug, number)
        for name in target.artifacts:
            target.artifact_path(name)
        with self._writing(model_slug):
            self.get(model_slug, number)  # still there, and no other file claims its number
            return self._move_refs(model_slug, {ref: number})[ref]

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
        return load_baseline_file(self._numbered(model_slug, number))

    def _numbered(self, model_slug: str, number: int) -> Path:
        """The file of baseline ``number`` of a model."""
        matches = [path for n, _, path in self._files(model_slug) if n == number]
        if not matches:
            raise BaselineError(
                f"baseline #{number:04d} of {model_slug!r} does not exist",
                "see `gate baseline list`",
            )
        return matches[0]

    def _pick_slug(self, model_slug: str | None) -> str:
        slugs = self.slugs()
        if model_slug is not None:
            if model_slug not in slugs:
                raise BaselineError(
                    f"no baselines for model {model_slug!r} in {self.root}",
                    (f"{suggest(model_slug, slugs)}; " if slugs else "record one first; ")
                    + "a build made from another model (a pre-quantized checkpoint) is judged"
                    " against that model's baselines: pass --model-slug SLUG, or name the model"
                    " as [run].baseline in gate.toml",
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
        return load_baseline_file(self.locate(ref_or_path, model_slug))

    def locate(self, ref_or_path: str, model_slug: str | None = None) -> Path:
        """The file :meth:`resolve` reads for ``ref_or_path`` (found, not read)."""
        text = ref_or_path.strip()
        if Path(text).is_file():
            return Path(text)
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
            return self._numbered(slug, refs[text])
        if text.isdigit():
            return self._numbered(slug, int(text))
        if text == "latest":
            return files[-1][2]
        labelled = [path for _, label, path in files if label == text]
        if labelled:
            return labelled[-1]
        choices = sorted({*refs, *(label for _, label, _ in files), "latest"})
        raise BaselineError(
            f"unknown baseline ref {text!r} for model {slug!r}", suggest(text, choices)
        )
