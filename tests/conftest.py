"""Shared pytest configuration: markers, matplotlib backend, x64 fixture."""

import os

import jax
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def x64():
    """Enables float64 for one test and restores the previous setting afterwards."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", previous)
