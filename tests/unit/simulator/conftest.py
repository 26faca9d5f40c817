from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from simtools import ALICE_KEY, client, lxd_sim, sample_sim

from capmaas.simulator import Simulator


@pytest.fixture
def sim() -> Simulator:
    return sample_sim()


@pytest.fixture
async def admin(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim) as c:
        yield c


@pytest.fixture
async def alice(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim, ALICE_KEY) as c:
        yield c


@pytest.fixture
async def anon(sim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim, None) as c:
        yield c


@pytest.fixture
def lsim() -> Simulator:
    return lxd_sim()


@pytest.fixture
async def ladmin(lsim: Simulator) -> AsyncIterator[httpx.AsyncClient]:
    async with client(lsim) as c:
        yield c
