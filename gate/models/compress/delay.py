"""The ``delay:<N>ms`` recipe: a build that is slower and otherwise identical.

A forward pre-hook on the top-level model sleeps a fixed time before every
forward call, i.e. once per prefill and once per decoding step of
``generate``. Outputs are bit-identical to the unmodified model, so only the
latency tier can tell the builds apart; the gate's own tests use it to prove
that a slowed build is caught.
"""

from __future__ import annotations

import time
from typing import Any

from torch import nn

#: Attribute on the model holding the hook handle (so provenance can see it).
HANDLE_ATTR = "_gate_delay_handle"


def add_forward_delay(model: nn.Module, seconds: float) -> None:
    """Make every forward call of ``model`` sleep ``seconds`` first."""
    if seconds < 0:
        raise ValueError("delay must be >= 0")

    def sleep_first(module: nn.Module, args: Any) -> None:
        time.sleep(seconds)

    setattr(model, HANDLE_ATTR, model.register_forward_pre_hook(sleep_first))
