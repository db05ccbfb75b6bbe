"""Compression methods, one class each, and their registry (no torch at import).

:mod:`gate.models.methods.base` is the shape every method has and the facts it
declares; each other module holds one method (``quanto``, ``torchao``, ``hqq``
...); :mod:`gate.models.methods.registry` lists them (one line each) and reads
out-of-tree methods from the ``gate.methods`` entry-point group.
"""
