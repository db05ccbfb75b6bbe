"""The one schema-version rule every versioned file of the gate is read with."""

from __future__ import annotations

import pytest

from gate.errors import BaselineError, DataError, ExitCode
from gate.store.schema import check_schema_version


@pytest.mark.parametrize("version", [1, 2])
def test_versions_up_to_the_readable_one_are_accepted(version: int) -> None:
    data = {"schema_version": version}
    assert check_schema_version(data, "f.json", reads_up_to=2, error=DataError) == version


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"schema_version": 3}, "has schema_version 3; this gate reads up to 2"),
        ({"schema_version": 0}, "invalid schema_version 0"),
        ({"schema_version": "1"}, "no integer schema_version"),
        ({"schema_version": True}, "no integer schema_version"),
        ({}, "no integer schema_version"),
    ],
)
def test_unreadable_versions_raise_the_callers_error(
    data: dict[str, object], fragment: str
) -> None:
    with pytest.raises(BaselineError) as info:
        check_schema_version(data, "baseline f.json", reads_up_to=2, error=BaselineError)
    line = info.value.format_line()
    assert line.startswith("baseline f.json ") and fragment in line
    assert info.value.exit_code == ExitCode.USAGE_ERROR


def test_an_optional_version_may_be_absent_but_is_checked_when_present() -> None:
    assert (
        check_schema_version({}, "refs.json", reads_up_to=1, error=DataError, required=False)
        is None
    )
    with pytest.raises(DataError, match="reads up to 1"):
        check_schema_version(
            {"schema_version": 5}, "refs.json", reads_up_to=1, error=DataError, required=False
        )
