"""Fixtures for the MAAS client unit tests: a scripted fake MAAS behind httpx.MockTransport."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from maas_fakes import API_KEY, URL, FakeMaas

from capmaas.maas import MaasClient


@pytest.fixture
def fake() -> FakeMaas:
    return FakeMaas()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def responses() -> list[tuple[str, str, int]]:
    return []


@pytest.fixture
async def client(
    fake: FakeMaas, sleeps: list[float], responses: list[tuple[str, str, int]]
) -> AsyncIterator[MaasClient]:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async with MaasClient(
        URL,
        api_key=API_KEY,
        transport=httpx.MockTransport(fake),
        sleep=sleep,
        on_response=lambda m, e, s, _seconds: responses.append((m, e, s)),
    ) as maas:
        yield maas
