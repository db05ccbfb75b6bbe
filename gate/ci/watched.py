"""The repository paths a run config's verdict depends on, and whether a change touches them.

The gate workflow (``gate init`` writes it; the project's own is
``.github/workflows/gate.yml``) gates a pull request only when it changes
something that can change a verdict. Those paths come from the run config
itself, so the filter never names directories that do not exist:

* the run config file;
* the thresholds file (``[run].thresholds``, else ``thresholds.toml``);
* the baseline store (``[run].store``, else ``baselines``), every file below it;
* calibration files (``[run]`` and every candidate's ``calibration``);
* local model directories inside the repository: ``[run].baseline``, every
  candidate's ``model``, every ``[[judges]]`` ``model`` (a name that is a
  directory here, or that starts with ``./``), every file below them;
* ``[run].watch``: globs of anything else the builds depend on (recipes,
  quantization configs).

Hugging Face ids, absolute paths and paths that leave the repository are not
watched (a change to them is not a change to the repository). Globs use
``**`` for any run of path components and ``*`` within one component.

Reads the config with the standard library only (no numpy, no torch): the
workflow's first job runs it on a small hosted runner, before any GPU job is
started. ``gate watched --config gate.toml [--changed FILE]`` (a hidden
command, :func:`verdict_lines`) prints the globs, then, with ``--changed`` (one changed path per line, as
``git diff --name-only`` writes), the changed paths they match and a last line
``needed=true`` or ``needed=false``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gate.config import load_toml
from gate.errors import ConfigError, UsageError
from gate.gating.thresholds_file import THRESHOLDS_FILE
from gate.store.location import DEFAULT_STORE

#: The packaged demo model's name (never a repository path).
DEMO = "demo"


def _relative(path: str, root: Path) -> str | None:
    """``path`` as a normalized POSIX path inside the repository, or ``None`` when it is not."""
    text = path.strip()
    if not text or text.startswith(("/", "~")) or "://" in text:
        return None
    norm = posixpath.normpath(text.replace("\\", "/"))
    if norm == "." or norm.startswith("../") or norm == "..":
        return None
    return norm


def _is_local_model(model: str, root: Path) -> bool:
    """A model name that names a directory of the repository (not a hub id, not ``demo``)."""
    text = model.strip()
    if text == DEMO or not text:
        return False
    return text.startswith("./") or (root / text).is_dir()


def _strings(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else [v for v in value or () if isinstance(v, str)]


def watched_paths(config_path: Path, data: Mapping[str, Any], root: Path) -> list[str]:
    """The globs (relative to ``root``, the repository) that ``data``'s verdicts depend on.

    ``config_path`` is the run config as the workflow names it (relative to ``root``).
    """
    run = data.get("run", {}) if isinstance(data.get("run"), Mapping) else {}
    candidates = [c for c in data.get("candidates", []) or [] if isinstance(c, Mapping)]
    judges = [j for j in data.get("judges", []) or [] if isinstance(j, Mapping)]
    files = [str(config_path), str(run.get("thresholds") or THRESHOLDS_FILE)]
    files += _strings(run.get("calibration"))
    files += [c["calibration"] for c in candidates if isinstance(c.get("calibration"), str)]
    trees = [str(run.get("store") or DEFAULT_STORE)]
    models = _strings(run.get("baseline"))
    models += [c["model"] for c in candidates if isinstance(c.get("model"), str)]
    models += [j["model"] for j in judges if isinstance(j.get("model"), str)]
    trees += [m for m in models if _is_local_model(m, root)]
    globs: list[str] = []
    for path in files:
        rel = _relative(path, root)
        if rel is not None:
            globs.append(rel)
    for path in trees:
        rel = _relative(path, root)
        if rel is not None:
            globs.append(f"{rel}/**")
    extra = run.get("watch", [])
    if not isinstance(extra, list) or not all(isinstance(g, str) for g in extra):
        raise ConfigError(
            f"{config_path}: run.watch must be an array of path globs",
            'write watch = ["recipes/**", "quant/config.json"]',
        )
    for glob in extra:
        rel = _relative(glob, root)
        if rel is None:
            raise ConfigError(
                f"{config_path}: run.watch glob {glob!r} is not inside the repository",
                "give a path relative to the repository root",
            )
        globs.append(rel)
    return list(dict.fromkeys(globs))


def glob_regex(glob: str) -> re.Pattern[str]:
    """The regex of ``glob``: ``**`` any run of characters (``/`` included), ``*`` and ``?``
    within one path component; ``dir/**`` matches everything below ``dir``."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def touched(changed: Iterable[str], globs: Sequence[str]) -> list[str]:
    """The changed paths that match one of ``globs``, in the order given."""
    patterns = [glob_regex(g) for g in globs]
    hits: list[str] = []
    for line in changed:
        path = line.strip()
        if path and any(p.match(path) for p in patterns):
            hits.append(path)
    return hits


def verdict_lines(config: Path, changed: Path | None, root: Path) -> list[str]:
    """What ``gate watched`` prints: the watched globs (``watched: GLOB``), then, with
    ``changed`` (a file of changed paths, one per line), the changed paths they match
    (``changed: PATH``) and ``needed=true`` or ``needed=false``.

    A missing config or an unreadable ``changed`` file raises :class:`~gate.errors.GateError`
    (exit 4), which the command line turns into its one line.
    """
    if not config.is_file():
        raise ConfigError(
            f"run config {config} not found", "pass --config with the workflow's config"
        )
    globs = watched_paths(config, load_toml(config), root)
    lines = [f"watched: {glob}" for glob in globs]
    if changed is None:
        return lines
    try:
        paths = changed.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(
            f"cannot read {changed}: {exc.strerror or exc}",
            "pass --changed a readable file of changed paths, one per line",
        ) from None
    hits = touched(paths, globs)
    lines += [f"changed: {path}" for path in hits]
    lines.append(f"needed={'true' if hits else 'false'}")
    return lines
