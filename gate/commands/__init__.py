"""One module per ``gate`` command; :mod:`gate.cli` assembles them."""
