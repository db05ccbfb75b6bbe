"""What ``gate init`` writes into a team's repository, and how it writes it.

Four files, from the templates packaged under ``gate/assets/init`` and the
packaged ``thresholds.toml``:

* ``gate.toml``: the run config, its ``[run].baseline`` the model given, one
  ``control`` candidate (the baseline model unmodified, which the gate must
  approve) and commented examples of the builds to add;
* ``thresholds.toml``: the packaged defaults;
* ``.github/workflows/gate.yml``: the pull-request gate (changes, plan,
  one job per candidate, merge, an always-running verdict), through the
  GitHub Action ``action.yml`` of this distribution;
* ``.github/workflows/latency-audit.yml``: the weekly latency drift audit.

Nothing is overwritten: every target is checked before the first is written,
and one that exists is a :class:`~gate.errors.UsageError` (exit 4) naming it.
A write that fails midway removes what this call wrote, so a repository never
holds half of the set. The project's own ``.github/workflows/gate.yml`` is
:func:`render_targets` of the same template with the action ``./`` (a test compares them).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from gate import __version__
from gate.errors import GateError, UsageError
from gate.gating.thresholds import packaged_thresholds_path
from gate.gating.thresholds_file import THRESHOLDS_FILE
from gate.models.model_spec import DEMO, ModelSpec
from gate.store.baseline import check_names

#: The distribution's name on package indexes (the command and the import package are ``gate``).
DISTRIBUTION = "llm-compression-gate"
#: The run config's file name.
CONFIG = "gate.toml"
#: What ``gate init`` writes, relative to the repository root, in order.
TARGETS: tuple[str, ...] = (
    CONFIG,
    THRESHOLDS_FILE,
    ".github/workflows/gate.yml",
    ".github/workflows/latency-audit.yml",
)
#: Where the action lives when the installed gate does not say (``OWNER`` to replace).
PLACEHOLDER_OWNER = "OWNER"
#: The ref of the packaged demo model's committed baseline.
DEMO_REF = "fp32"
#: The ref a new model's baseline is recorded under.
DEFAULT_REF = "base"

_ACTION_RE = re.compile(
    r"^(\./|[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[A-Za-z0-9_./-]+)$"
)
_GITHUB_URL = re.compile(
    r"^(?:git\+)?https://github\.com/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+?)(?:\.git)?/?$"
)


@dataclass(frozen=True)
class InitSettings:
    """What the written files name: the baseline model, its ref and the action to use."""

    model: str
    ref: str
    action: str


def _template(name: str) -> str:
    return resources.files("gate").joinpath("assets", "init", name).read_text(encoding="utf-8")


def packaged_thresholds() -> str:
    """The packaged ``thresholds.toml`` (the defaults every command falls back to)."""
    return packaged_thresholds_path().read_text("utf-8")


def installed_action() -> str | None:
    """``OWNER/REPO@COMMIT`` of the GitHub repository this gate was pip-installed from.

    Read from the install's ``direct_url.json`` (PEP 610), which pip writes for
    an install from a git URL; ``None`` for any other install (a wheel, a
    clone's directory, an index).
    """
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    vcs = info.get("vcs_info") if isinstance(info, dict) else None
    match = _GITHUB_URL.match(str(info.get("url", ""))) if isinstance(vcs, dict) else None
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    if match is None or not isinstance(commit, str):
        return None
    return f"{match.group(1)}/{match.group(2)}@{commit}"


def default_action() -> str:
    """The action reference the workflows use: the installed repository at its commit,
    else ``OWNER/gate@v<version>`` (``OWNER`` for the user to replace)."""
    return installed_action() or f"{PLACEHOLDER_OWNER}/gate@v{__version__}"


def check_settings(model: str, ref: str | None, action: str | None) -> InitSettings:
    """Validate ``gate init``'s arguments as the run would (one line, exit 4, for a bad one)."""
    try:
        spec = ModelSpec.parse(model)
        spec.local_dir  # noqa: B018 - raises for a local-looking path that does not exist
        slug = spec.slug
    except GateError as exc:
        raise UsageError(f"--model {model!r}: {exc.message}", exc.hint) from None
    if spec.revision is not None:
        raise UsageError(
            f"--model {model!r}: a revision cannot be written as a run config's baseline",
            "give the model id without @revision",
        )
    chosen_ref = ref or (DEMO_REF if spec.source == DEMO else DEFAULT_REF)
    try:
        check_names(label=chosen_ref, refs=[chosen_ref], model_slug=slug)
    except GateError as exc:
        raise UsageError(f"--ref {chosen_ref!r}: {exc.message}", exc.hint) from None
    chosen_action = action or default_action()
    if not _ACTION_RE.match(chosen_action):
        raise UsageError(
            f"--action {chosen_action!r} is not an action reference",
            "give OWNER/REPO@REF (a tag, branch or commit) or ./ for the repository's own",
        )
    return InitSettings(model=spec.source, ref=chosen_ref, action=chosen_action)


def render_targets(settings: InitSettings) -> dict[str, str]:
    """The text of every target (:data:`TARGETS`) for ``settings``."""
    values = {
        "@@MODEL@@": json.dumps(settings.model),
        "@@REF@@": json.dumps(settings.ref),
        "@@ACTION@@": settings.action,
        "@@CONFIG@@": CONFIG,
        "@@DIST@@": DISTRIBUTION,
        "@@VERSION@@": __version__,
    }
    files: dict[str, str] = {}
    for target, template in zip(
        TARGETS, ("gate.toml", None, "gate.yml", "latency-audit.yml"), strict=True
    ):
        text = packaged_thresholds() if template is None else _template(template)
        for key, value in values.items():
            text = text.replace(key, value)
        files[target] = text
    return files


def write_new(root: Path, files: dict[str, str]) -> list[Path]:
    """Write ``files`` under ``root``, none of which may exist yet; all or nothing.

    Raises :class:`UsageError` naming the first target that exists (nothing is
    written then) or the one that could not be written (what was written is removed).
    """
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory", "run gate init in your repository's root")
    paths = [root / name for name in files]
    for path in paths:
        if path.exists() or path.is_symlink():
            raise UsageError(
                f"{path} exists: gate init never overwrites a file",
                "move it away, or edit it by hand",
            )
    written: list[Path] = []
    made_dirs: list[Path] = []
    try:
        for path, text in zip(paths, files.values(), strict=True):
            for parent in reversed(path.parents):
                if parent != root and root in parent.parents and not parent.exists():
                    parent.mkdir()
                    made_dirs.append(parent)
            with path.open("x", encoding="utf-8") as handle:
                written.append(path)
                handle.write(text)
    except OSError as exc:
        for path in reversed(written):
            path.unlink(missing_ok=True)
        for directory in reversed(made_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise UsageError(
            f"cannot write {exc.filename or root}: {exc.strerror or exc}",
            "check the directory's permissions; nothing was written",
        ) from None
    return written


def next_steps(settings: InitSettings) -> list[str]:
    """What the user does after ``gate init``, one line each."""
    record = (
        f"the demo model's {settings.ref} baseline is packaged: nothing to record"
        if settings.model == DEMO
        else "record the baseline once, on the hardware the gate runs on: "
        f"gate baseline record --config {CONFIG} --label {settings.ref} --ref {settings.ref}"
    )
    steps = [
        record,
        f"add your compressed builds as [[candidates]] of {CONFIG}, then check it: "
        f"gate run --config {CONFIG} --dry-run",
        "calibrate the thresholds to this machine's noise: "
        f"gate calibrate --model {settings.model} --config {CONFIG} --out thresholds.toml.new "
        "(then compare with thresholds.toml and keep what you accept)",
        "commit baselines/ with gate.toml and thresholds.toml, or point [run].store "
        "(or GATE_STORE) at a store the runners share",
        "make the `verdict` job of the gate workflow a required check (branch protection)",
    ]
    if settings.action.startswith(f"{PLACEHOLDER_OWNER}/"):
        steps.append(
            f"replace {PLACEHOLDER_OWNER} in `uses: {settings.action}` of both workflows with the "
            "GitHub owner of the gate repository you install from (or rerun with --action)"
        )
    return steps
