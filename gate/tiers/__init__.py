"""Tier workloads: a Backend plus settings in, Measurements out."""
