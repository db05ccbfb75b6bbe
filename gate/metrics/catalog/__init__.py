"""Torch-free metric declarations, one module per tier."""
