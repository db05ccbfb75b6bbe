"""llama.cpp's llama-server as a serving engine: its dialect, its protocol, the made GGUF served."""
