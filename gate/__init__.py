"""gate: a CI/CD regression gate for compressed LLM builds."""

__version__ = "0.1.0"
