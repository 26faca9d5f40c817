"""Fixtures for the reconciler unit tests; they live in ``reconciler_env`` (a module name of its own, so test
files can import its helpers whichever other test directories share the pytest run)."""

from reconciler_env import env, short_release_gathering, sim

__all__ = ["env", "short_release_gathering", "sim"]
