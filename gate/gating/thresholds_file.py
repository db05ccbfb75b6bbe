"""``THRESHOLDS_FILE``: the name of the thresholds file when nothing names one.

Declared here, apart from the thresholds reader and with the standard library
only, so what needs only the name (``gate watched`` on the gate workflow's small
hosted runner, :mod:`gate.ci.watched`) imports no numpy.
"""

from __future__ import annotations

#: Name of the user's file, looked up in the working directory.
THRESHOLDS_FILE = "thresholds.toml"

__all__ = ["THRESHOLDS_FILE"]
