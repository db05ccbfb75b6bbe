"""The ``delay:<N>ms`` recipe: a build that is slower and otherwise identical.

A forward pre-hook on the top-level model spends a fixed amount of the
calling thread's CPU time before every forward call, i.e. once per prefill and
once per decoding step of ``generate``. Outputs are bit-identical to the
unmodified model, so only the latency tier can tell the builds apart; the
gate's own tests use it to prove that a slowed build is caught.

The delay is work, not a sleep, because that is what a slower kernel is: on an
idle machine both take ``seconds`` of wall time, but on a loaded one a sleep
costs almost nothing (the thread would have waited for a core anyway, and the
scheduler favours a thread that slept), while work is stretched by the load
like the rest of the forward call. With a sleep, ``delay:5ms`` on the test
suite's tiny model measured +167 % (median end-to-end time) on an idle
two-core machine and -0.6 % (inter-token latency) on the same machine at load 10.
"""

from __future__ import annotations

import time
from typing import Any

from torch import nn

#: Attribute on the model holding the hook handle (so provenance can see it).
HANDLE_ATTR = "_gate_delay_handle"


def spend_cpu(seconds: float) -> None:
    """Busy-wait until the calling thread has used ``seconds`` more of CPU time."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def add_forward_delay(model: nn.Module, seconds: float) -> None:
    """Make every forward call of ``model`` spend ``seconds`` of CPU time first."""
    if seconds < 0:
        raise ValueError("delay must be >= 0")

    def work_first(module: nn.Module, args: Any) -> None:
        spend_cpu(seconds)

    setattr(model, HANDLE_ATTR, model.register_forward_pre_hook(work_first))
