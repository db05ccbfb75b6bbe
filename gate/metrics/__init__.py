"""Metric definitions (pure functions) and the metric registry."""
