"""Data for the gate: ShareGPT conversations, fidelity prompt sets, synthetic dialogues,
user prompt loaders, MCQ sets and capability probes, plus the packaged assets.

Modules are imported directly (``from gate.data.prompt_set import load_prompt_set``);
this package imports nothing heavy on its own.
"""
