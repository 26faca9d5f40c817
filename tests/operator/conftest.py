"""Fixtures for the operator tests; they live in ``operator_harness`` (a module name of its own, so test files
can import its helpers whichever other test directories share the pytest run)."""

from operator_harness import crds, harness, operator_env, sim

__all__ = ["crds", "harness", "operator_env", "sim"]
