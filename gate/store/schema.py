"""The one rule for reading a versioned file: which schema versions this gate reads.

Every JSON file the gate writes (baselines, refs, measurements, results, MCQ
results) carries an integer ``schema_version``. A reader accepts versions
``1 .. reads_up_to``: a newer file needs a newer gate, anything else is
corrupt. Problems are one-line errors of the type the caller names (a
:class:`~gate.errors.BaselineError` for the store, a
:class:`~gate.errors.DataError` for user inputs), so each keeps its exit code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gate.errors import GateError


def check_schema_version(
    data: Mapping[str, Any],
    source: str,
    *,
    reads_up_to: int,
    error: type[GateError],
    required: bool = True,
) -> int | None:
    """The ``schema_version`` of ``data`` when this gate can read it; else ``error``.

    ``source`` names the file in the message (``baseline path/0001-fp16.json``).
    With ``required=False`` a file without a version is accepted (``None``); a
    version that is present is still checked.
    """
    if "schema_version" not in data and not required:
        return None
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise error(
            f"{source} has no integer schema_version",
            "the file is corrupt or was not written by gate; restore or re-create it",
        )
    if version > reads_up_to:
        raise error(
            f"{source} has schema_version {version}; this gate reads up to {reads_up_to}",
            "upgrade gate to read it",
        )
    if version < 1:
        raise error(
            f"{source} has invalid schema_version {version}",
            "the file is corrupt; restore or re-create it",
        )
    return version
