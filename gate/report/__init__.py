"""Reports of a gate run: console (rich), results JSON, and (issue 7) markdown/HTML/GitHub.

Every report consumes the same :class:`~gate.gating.verdict.GateOutcome`; the results
JSON (:mod:`gate.report.results_json`) is the interchange format that later
reports read back as :class:`~gate.report.results.Results`.
"""
