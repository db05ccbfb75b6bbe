"""``gate calibrate``'s pure part: thresholds from a measured noise floor.

Four ideas, one module each, and the record two of them share:

* :mod:`~gate.gating.calibration.bounds`: the bound derivation (noise quantile,
  margin, the declared ratio) and the power figures of each metric;
* :mod:`~gate.gating.calibration.record`: what a calibration run found, the
  ``[calibration]`` table of a calibrated ``thresholds.toml``;
* :mod:`~gate.gating.calibration.writer`: that ``thresholds.toml`` written out;
* :mod:`~gate.gating.calibration.reader`: its ``[calibration]`` table read back;
* :mod:`~gate.gating.calibration.plan`: the item counts each tier needs, and
  their time (the run planner).
"""
