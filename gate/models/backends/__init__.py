"""Model backends: the seam between the gate and an inference engine."""
