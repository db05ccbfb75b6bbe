"""What a verdict names as the baseline it was judged against when no ref names it.

A verdict, a power statement and a version or placement drift each carry
``against``: the baseline ref of the comparison (``fp16``, ``fp32``). A
comparison made without a ref (a verdict built directly, a results JSON of an
older schema that lacks the field) names it :data:`DEFAULT_AGAINST`.
"""

from __future__ import annotations

#: ``against`` of a comparison whose baseline has no ref name.
DEFAULT_AGAINST = "baseline"

__all__ = ["DEFAULT_AGAINST"]
