"""One module per ``gate`` command; :mod:`gate.cli` assembles them.

Importing the commands first hides the kernel packages that transformers would import on
every model load (:func:`gate.models.methods.registry.hide_eager_kernels`): a command that
does not use them never pays for them.
"""

from gate.models.methods.registry import hide_eager_kernels

hide_eager_kernels()
