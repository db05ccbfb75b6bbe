"""The gate's tier suites: one pytest file per tier (``test_<tier>.py``).

They live at the top of the repository and ship inside the wheel as
``gate.suites`` (``package-dir`` in pyproject.toml), so ``gate run`` finds them
whether gate is installed from a checkout or from a wheel.
"""
