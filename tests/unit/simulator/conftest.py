from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from simtools import ADMIN_KEY, ALICE_KEY, client, hmac_client, lxd_sim, sample_sim

from capmaas_dev.simulator import Simulator


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Modules that set ``AUTH_METHODS = ("plaintext", "hmac")`` run their ``admin``/``alice``/``ladmin``
    tests once per OAuth signature method."""
    if "auth_method" in metafunc.fixturenames:
        metafunc.parametrize("auth_method", getattr(metafunc.module, "AUTH_METHODS", ("plaintext",)))


def _client(sim: Simulator, key: str, auth_method: str) -> httpx.AsyncClient:
    return hmac_client(sim, key) if auth_method == "hmac" else client(sim, key)


@pytest.fixture
def sim() -> Simulator:
    return sample_sim()


@pytest.fixture
async def admin(sim: Simulator, auth_method: str) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(sim, ADMIN_KEY, auth_method) as c:
        yield c


@pytest.fixture
async def alice(sim: Simulator, auth_method: str) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(sim, ALICE_KEY, auth_method) as c:
        yield c


@pytest.fixture
async def anon(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim, None) as c:
        yield c


@pytest.fixture
def lsim() -> Simulator:
    return lxd_sim()


@pytest.fixture
async def ladmin(lsim: Simulator, auth_method: str) -> AsyncIterator[httpx.AsyncClient]:
    async with _client(lsim, ADMIN_KEY, auth_method) as c:
        yield c
