"""Fixtures shared by the unit tests of several folders. They live in ``fake_apiserver`` and ``trust_store``
(module names of their own, importable from any folder under ``tests/unit``: pytest puts this folder on
``sys.path`` when it loads this file)."""

from fake_apiserver import loopback
from trust_store import trust_store_loads

__all__ = ["loopback", "trust_store_loads"]
