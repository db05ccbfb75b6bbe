"""What ``gate localize`` is asked to do, typed: one frozen :class:`LocalizeRequest`.

Its two callers, the ``gate localize`` command and ``gate run --localize`` (on a
blocked build), each build one request from their own options and hand it
whole to :func:`gate.commands.localize.run_localize`, as ``gate run`` hands a
:class:`~gate.session.options.SessionOptions` to its sessions. The files it
writes are :class:`LocalizeOutputs`, checked before any model loads
(:meth:`LocalizeOutputs.check`). Nothing here imports torch: ``--dry-run``
loads no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gate.errors import UsageError
from gate.models.load_settings import LoadSettings
from gate.store.writable import check_writable

#: The recovered share of the KL loss the swap subset must resolve, unless told
#: (``gate localize --resolve``; :class:`gate.localize.locate.LocalizeSettings`).
DEFAULT_RESOLVE = 0.25


@dataclass(frozen=True)
class LocalizeOutputs:
    """The files ``gate localize`` writes besides its console report (``None``: not written)."""

    #: The localization's JSON document (``--json``).
    json: Path | None = None
    #: The HTML report with the sensitivity plot (``--html``).
    html: Path | None = None
    #: The per-layer sensitivity plot alone (``--png``).
    png: Path | None = None

    def named(self) -> list[tuple[str, Path]]:
        """``(option, path)`` of each file to write, in option order."""
        files = (("--json", self.json), ("--html", self.html), ("--png", self.png))
        return [(option, path) for option, path in files if path is not None]

    def check(self) -> None:
        """Every file can be written, and no two options name the same file (else one
        :class:`~gate.errors.UsageError`, exit 4; nothing is created)."""
        seen: dict[Path, str] = {}
        for option, path in self.named():
            check_writable(path, option)
            same = seen.setdefault(path.resolve(), option)
            if same != option:
                raise UsageError(
                    f"{same} and {option} both name {path}", "give each output its own file"
                )


@dataclass(frozen=True)
class LocalizeRequest:
    """One ``gate localize`` of one candidate build against one stored baseline."""

    #: The candidate model (a model id, a local directory, or ``demo``).
    candidate: str
    #: Its weight recipe (``None``: the model as it is, such as a checkpoint directory).
    recipe: str | None = None
    #: The baseline ref (``None``: the run config's, else ``latest``).
    against: str | None = None
    #: The store slug of the baselines (``None``: from the candidate).
    model_slug: str | None = None
    #: The baseline store (``None``: the run config's, else the default).
    store: Path | None = None
    #: A run config (``gate.toml``): ``[run]`` defaults and ``[tiers.fidelity]``.
    config: Path | None = None
    #: ``thresholds.toml`` (``None``: the default): the fidelity bounds the repair must meet.
    thresholds: Path | None = None
    outputs: LocalizeOutputs = field(default_factory=LocalizeOutputs)
    #: The recovered share of the KL loss the swap subset must resolve (sets its size).
    resolve: float = DEFAULT_RESOLVE
    #: Reference prompts of the divergence pass (``None``: the whole pack).
    limit: int | None = None
    #: Gate the repaired build (``gate run --tiers fidelity``) once it is proposed.
    gate_repair: bool = True
    #: ``--device``, ``--dtype``, ``--trust-remote-code`` (each over the run config's), the
    #: settings both builds load with and the repaired build is gated with.
    load: LoadSettings = field(default_factory=LoadSettings)
    #: Check the inputs and stop: no model is loaded.
    dry_run: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.resolve <= 1.0:
            raise UsageError(
                f"resolve {self.resolve} is not a share of the loss", "give a share in (0, 1]"
            )
        if self.limit is not None and self.limit < 2:
            raise UsageError(f"{self.limit} reference prompts are too few", "give 2 or more")


__all__ = ["DEFAULT_RESOLVE", "LocalizeOutputs", "LocalizeRequest"]
