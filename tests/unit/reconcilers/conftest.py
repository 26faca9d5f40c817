"""Fixtures for the reconciler unit tests; they live in ``reconciler_env`` (a module name of its own, so test
files can import its helpers whichever other test directories share the pytest run)."""

from reconciler_env import env, sim

__all__ = ["env", "sim"]
