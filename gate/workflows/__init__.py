"""Whole-command workflows: the plan of a run, several candidates, the CI matrix and merge, the demo panels, calibration."""
