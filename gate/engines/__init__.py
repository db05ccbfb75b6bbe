"""Serving engines: the HTTP backend, the servers gate starts, and one dialect per engine."""
