"""Fixtures shared by the unit tests of several folders. They live in ``fake_apiserver`` (a module name of
its own, importable from any folder under ``tests/unit``: pytest puts this folder on ``sys.path`` when it
loads this file)."""

from fake_apiserver import loopback

__all__ = ["loopback"]
