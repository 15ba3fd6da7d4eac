"""Shared pytest configuration: markers, matplotlib backend, x64 fixture."""

import os

import pytest
from hypothesis import settings

from tests.helpers import enable_x64

os.environ.setdefault("MPLBACKEND", "Agg")

# CI runs hypothesis with fixed seeds (a landing must not depend on luck); local runs
# keep exploring new examples.  Tests with their own ``settings`` that set
# ``derandomize`` follow ``CI_DERANDOMIZE``.
CI_DERANDOMIZE = bool(os.environ.get("CI"))
settings.register_profile("ci", derandomize=True, deadline=None)
if CI_DERANDOMIZE:
    settings.load_profile("ci")


@pytest.fixture
def x64():
    """Enables float64 for one test and restores the previous setting afterwards
    (:func:`tests.helpers.enable_x64`, the one x64 switch)."""
    with enable_x64(True):
        yield
