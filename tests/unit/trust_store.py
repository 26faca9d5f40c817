"""The ``trust_store_loads`` fixture: every load of the system's trust store while a test runs (for the tests
that say which TLS contexts load it: the MAAS transports' and the operator's apiserver context). A plain
module, like ``fake_apiserver``; ``tests/unit/conftest.py`` makes the fixture visible to every folder."""

from __future__ import annotations

import ssl

import pytest


@pytest.fixture
def trust_store_loads(monkeypatch: pytest.MonkeyPatch) -> list[ssl.SSLContext]:
    """The contexts that load the system's trust store (``set_default_verify_paths``) from here on, in
    order; each still loads it."""
    loads: list[ssl.SSLContext] = []
    real = ssl.SSLContext.set_default_verify_paths

    def counted(self: ssl.SSLContext) -> None:
        loads.append(self)
        real(self)

    monkeypatch.setattr(ssl.SSLContext, "set_default_verify_paths", counted)
    return loads
