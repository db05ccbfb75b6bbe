"""The suite's groups for ``pytest-xdist --dist loadgroup`` (scripts/test.sh).

A module of its own, imported by tests/conftest.py as its hook, so that
tests/test_xdist_groups.py can run it in a small suite without the suite's
fixtures and their imports.
"""

from __future__ import annotations

import pytest

#: The xdist group of the tests that use the session's real servers: they share
#: them, so they run on one worker, and first (the longest group).
ENGINE_GROUP = "engine"
#: The session fixtures that are a running server.
SHARED_SERVERS = {"served", "served_bf16"}
#: The xdist group of the files that share a recorded baseline (a session fixture): one
#: worker, so that it is recorded once.
BASELINE_GROUP = "shared-baseline"
#: The session fixtures that are a recorded baseline.
SHARED_BASELINES = {"smollm2_fidelity_base"}


#: The order in which the groups are handed out (scripts/test.sh passes
#: ``--no-loadscope-reorder``, so xdist keeps the collection's order instead of
#: sorting the groups by their number of tests, which put the one-test files that
#: start servers of their own last, on one worker, while the other one idled).
ORDER_ENGINE_GROUP, ORDER_BASELINE_GROUP, ORDER_ENGINE_FILE, ORDER_SLOW_FILE, ORDER_REST = range(5)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group the tests for ``--dist loadgroup``: the engine tests that share the
    session's servers in one group, the files that share a recorded baseline in one,
    every other test with the rest of its file (its
    module fixtures, a baseline recorded or a server started for the module, built
    once). The longest first (a greedy longest-first schedule on two workers): the
    engine group, the shared baseline's group, the files holding an engine test (a
    server of their own), those holding a ``slow`` test, then the rest: xdist hands
    the groups out in this order as workers free up, and the short ones at the end
    even out the two workers' ends."""
    if not config.pluginmanager.hasplugin("xdist"):
        return  # (an xdist worker sees ``--dist no``: the groups are marked whatever it says)
    engine_files = {_file(item) for item in items if item.get_closest_marker("engine")}
    slow_files = {_file(item) for item in items if item.get_closest_marker("slow")}
    sharing = {
        _file(item) for item in items if SHARED_BASELINES & set(getattr(item, "fixturenames", ()))
    }
    order: dict[str, int] = {}
    for item in items:
        engine = item.get_closest_marker("engine") is not None
        file = _file(item)
        if engine and SHARED_SERVERS & set(getattr(item, "fixturenames", ())):
            group, order[item.nodeid] = ENGINE_GROUP, ORDER_ENGINE_GROUP
        elif file in sharing:  # the whole file, beside the others sharing its baseline
            group, order[item.nodeid] = BASELINE_GROUP, ORDER_BASELINE_GROUP
        elif file in engine_files:
            group, order[item.nodeid] = file, ORDER_ENGINE_FILE
        else:
            group, order[item.nodeid] = file, ORDER_SLOW_FILE if file in slow_files else ORDER_REST
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: order[item.nodeid])


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]
