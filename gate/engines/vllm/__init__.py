"""vLLM's OpenAI-compatible server as a serving engine: its dialect."""
