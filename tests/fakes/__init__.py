"""Fakes at the GPU boundary only (NVML module, CUDA events); the code above them is real."""
