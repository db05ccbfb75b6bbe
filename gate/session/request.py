"""One gate session's typed request, and the plugin object that hands it to pytest.

``gate run``/``gate baseline record``/``gate demo`` build a :class:`SessionRequest`
(the mode, the model, the :class:`~gate.session.options.SessionOptions` and, when the
command already read and checked them, the session's
:class:`~gate.session.inputs.SessionInputs`) and pass it to ``pytest.main`` inside a
:class:`SessionRequestPlugin`. A module of its own, above both the options and the
inputs it carries, so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gate.session.inputs import SessionInputs
from gate.session.options import SessionOptions


@dataclass(frozen=True)
class SessionRequest:
    """Everything one gate session is handed: its mode, the model under test, its options.

    ``gate run``/``gate baseline record``/``gate demo`` pass it to pytest inside the
    plugin object (:func:`gate.session.runner.run_request`); ``--gate-*`` pytest options
    are read into one by :func:`gate.session.flags.request_from_pytest`.
    """

    #: ``"record"`` (measure a baseline) or ``"run"`` (measure a candidate).
    mode: Literal["record", "run"]
    #: Model id, local path or ``demo``.
    model: str
    options: SessionOptions = field(default_factory=SessionOptions)
    #: The session's inputs as the command read and checked them
    #: (:func:`gate.session.inputs.prepare_session`; their ``options`` are this
    #: request's, defaults filled in); ``None``: the plugin reads them.
    inputs: SessionInputs | None = None

    @classmethod
    def checked(cls, inputs: SessionInputs) -> SessionRequest:
        """The request of a session whose inputs a command already read and checked."""
        return cls(mode=inputs.mode, model=inputs.model, options=inputs.options, inputs=inputs)


class SessionRequestPlugin:
    """The typed request of one gate session, handed to pytest as a plugin object
    (``pytest.main(args, plugins=[SessionRequestPlugin(request)])``); it has no hooks
    of its own: ``pytest_configure`` finds it and starts the session's :class:`~gate.session.plugin.GatePlugin`."""

    def __init__(self, request: SessionRequest) -> None:
        self.request = request


__all__ = ["SessionRequest", "SessionRequestPlugin"]
