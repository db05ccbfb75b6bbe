"""What one pytest session of the gate holds: :class:`GateRun`.

Tier suites receive it through the session fixture ``gate_run``
(docs/architecture.md "How a tier suite talks to the gate"):

* ``mode`` — ``"record"`` (measuring a baseline) or ``"run"`` (a candidate);
* ``backend`` — the model under test, loaded on first access, once per session;
* ``settings(tier)`` — that tier's typed settings (``FidelitySettings``, ...):
  the baseline's recorded settings, ``[tiers.<tier>]`` of ``thresholds.toml``,
  of the run config, and flags, layered and validated before the session
  started (:mod:`gate.session.settings`);
* ``record(measurement)`` — add a validated :class:`~gate.measurement.Measurement`,
  stamped with how much the candidate's compression acted during the test
  that measured it (:mod:`gate.tiers.exercised`; the plugin calls
  ``begin_test`` before each tier test);
* ``attach(name, path)`` — a file to store beside the new baseline (record mode);
* ``baseline_artifact(name)`` — that file, hash-checked, from the baseline
  being compared with (run mode).

The plugin (:mod:`gate.session.plugin`) builds the ``GateRun`` and keeps it in
``config.stash``; nothing here is global.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from gate import progress
from gate.errors import BaselineError, DataError, UsageError
from gate.measurement import Measurement
from gate.metrics.registry import get_metric
from gate.models.activity import Reading
from gate.models.backends.base import Backend
from gate.models.backends.capabilities import activity_of
from gate.store.baseline import ARTIFACT_RE, Baseline
from gate.tiers import exercised

if TYPE_CHECKING:
    from gate.tiers.accuracy import AccuracySettings
    from gate.tiers.capability import CapabilitySettings
    from gate.tiers.fidelity import FidelitySettings
    from gate.tiers.generation import GenerationSettings
    from gate.tiers.judge import JudgeSettings
    from gate.tiers.latency import LatencySettings
    from gate.tiers.load import LoadTierSettings
    from gate.tiers.registry import TierSettings
    from gate.tiers.speculative import SpeculativeSettings

SessionMode = Literal["record", "run"]
MODES: tuple[SessionMode, ...] = ("record", "run")


@dataclass
class GateRun:
    """The state of one gate session, shared by every tier test."""

    mode: SessionMode
    model: str
    model_slug: str
    backend_factory: Callable[[], Backend]
    recipe: str | None = None
    #: Every tier's merged ``[tiers.<name>]`` table (validated; what a baseline records).
    tier_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: Run mode: the baselines compared with, by ref, in command-line order.
    baselines: Mapping[str, Baseline] = field(default_factory=dict)
    measurements: dict[str, Measurement] = field(default_factory=dict)
    artifacts: dict[str, Path] = field(default_factory=dict)
    #: Flat facts a tier reports about how it measured (stored in a new baseline's provenance).
    provenance: dict[str, Any] = field(default_factory=dict)
    #: Loads another build ``(model, recipe)`` through the same seam as ``backend``.
    build_loader: Callable[[str, str | None], Backend] | None = None
    #: The baseline build's own engine for the paired latency mode (``None``: load it).
    paired_build: Callable[[], Backend] | None = None
    #: A served build's server without its speculative options (the speculative tier), opened
    #: on first call (``None``: not served, or its command does not speculate).
    plain_build: Callable[[], Backend] | None = None
    #: Where the build runs when it runs in process (the session's one ``--device``
    #: setting, ``auto`` by default); ``None`` for a served build. An in-process judge
    #: runs there unless its ``[[judges]]`` entry names a device.
    in_process_device: str | None = None
    _backend: Backend | None = field(default=None, repr=False)
    #: The build's activity reading at the start of the current tier test.
    _activity_at_start: Reading | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UsageError(f"unknown gate mode {self.mode!r}", "use 'record' or 'run'")

    @property
    def backend(self) -> Backend:
        """The model under test, loaded on first access (once per session)."""
        if self._backend is None:
            with progress.task(f"loading {self.model} (recipe {self.recipe or 'none'})"):
                self._backend = self.backend_factory()
        return self._backend

    def load_build(self, model: str, recipe: str | None) -> Backend:
        """Load another build (not cached), e.g. the baseline build timed beside the candidate."""
        if self.build_loader is None:
            raise UsageError(
                f"this session cannot load a second build ({model}, recipe {recipe or 'none'})",
                "run it through the gate's pytest plugin",
            )
        return self.build_loader(model, recipe)

    @property
    def backend_loaded(self) -> bool:
        """Whether a test has asked for the backend (so its provenance is known)."""
        return self._backend is not None

    @property
    def baseline(self) -> Baseline | None:
        """The first baseline compared with (run mode), else ``None``."""
        return next(iter(self.baselines.values()), None)

    @overload
    def settings(self, tier: Literal["accuracy"]) -> AccuracySettings: ...
    @overload
    def settings(self, tier: Literal["capability"]) -> CapabilitySettings: ...
    @overload
    def settings(self, tier: Literal["fidelity"]) -> FidelitySettings: ...
    @overload
    def settings(self, tier: Literal["generation"]) -> GenerationSettings: ...
    @overload
    def settings(self, tier: Literal["judge"]) -> JudgeSettings: ...
    @overload
    def settings(self, tier: Literal["latency"]) -> LatencySettings: ...
    @overload
    def settings(self, tier: Literal["load"]) -> LoadTierSettings: ...
    @overload
    def settings(self, tier: Literal["speculative"]) -> SpeculativeSettings: ...
    @overload
    def settings(self, tier: str) -> TierSettings: ...

    def settings(self, tier: str) -> TierSettings:
        """The typed settings of ``tier`` (its defaults where nothing sets a key).

        Unknown tier or bad settings: :class:`~gate.errors.ConfigError` (the
        session validated them at its start, so this only fails for a tier name
        a suite misspells).
        """
        from gate.tiers.registry import build_settings

        return build_settings(tier, self.tier_settings.get(tier, {}))

    def begin_test(self) -> None:
        """Take the build's activity reading at the start of a tier test (see :meth:`record`)."""
        activity = activity_of(self._backend) if self._backend is not None else None
        self._activity_at_start = activity.reading() if activity is not None else None

    def record(self, measurement: Measurement) -> None:
        """Record a measurement; unknown metric, NaN or a second value of one metric -> error.

        The measurement is stamped with what the build's compression did since
        the test began (unless its tier stamped it already).
        """
        if self._backend is not None:
            before = self._activity_at_start
            measurement = exercised.attach([measurement], self._backend, before)[0]
        get_metric(measurement.name)
        measurement.validate()
        if measurement.name in self.measurements:
            raise DataError(
                f"metric {measurement.name!r} was recorded twice",
                "each metric is measured by exactly one tier test",
            )
        self.measurements[measurement.name] = measurement

    def attach(self, name: str, path: Path) -> None:
        """A file to store beside the new baseline (record mode; ignored in run mode)."""
        if not ARTIFACT_RE.match(name):
            raise UsageError(f"invalid artifact name {name!r}", "use e.g. 'reference-pack'")
        if not Path(path).is_file():
            raise DataError(f"artifact {name!r}: {path} is not a file", "write the file first")
        if name in self.artifacts:
            raise DataError(f"artifact {name!r} attached twice", "attach each artifact once")
        self.artifacts[name] = Path(path)

    def note_provenance(self, facts: Mapping[str, Any]) -> None:
        """Scalar facts for the new baseline's provenance (record mode), e.g. prompts a recorder cut."""
        self.provenance.update(facts)

    def baseline_artifact(self, name: str) -> Path:
        """Path of artifact ``name`` of the first baseline (hash-checked)."""
        if self.mode != "run" or self.baseline is None:
            raise BaselineError(
                f"no baseline to take artifact {name!r} from in {self.mode} mode",
                "artifacts of a baseline are available when running a candidate",
            )
        return self.baseline.artifact_path(name)
