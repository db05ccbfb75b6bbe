"""Load generators gate drives against served builds (GuideLLM)."""
