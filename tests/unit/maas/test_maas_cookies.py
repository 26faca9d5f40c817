"""The client reads an answer's cookies only when it sets one (session 40): a cookie MAAS sets is kept and
sent back as before, and an answer without ``Set-Cookie`` never reaches urllib's cookie jar."""

from __future__ import annotations

from http import cookiejar

import httpx
import pytest

from capmaas.maas import MaasClient

URL = "http://maas.test:5240/MAAS"
API_KEY = "ck:tk:ts"


class Answers:
    """A MAAS that sets a cookie on the version answer only, and records the cookies each request sent."""

    def __init__(self) -> None:
        self.sent: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.headers.get("cookie"))
        if request.url.path.endswith("/version/"):
            headers = [
                ("Set-Cookie", "csrftoken=abc; Path=/MAAS/"),
                ("Set-Cookie", "sessionid=s1; Path=/MAAS/"),
            ]
            return httpx.Response(200, json={"version": "3.7.0", "capabilities": []}, headers=headers)
        return httpx.Response(
            200, json={"system_id": "abc", "hostname": "h", "status": 4, "zone": {"id": 1, "name": "z"}}
        )


@pytest.fixture
def jar_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many answers urllib's cookie jar was handed (one entry each)."""
    reads: list[int] = []
    original = cookiejar.CookieJar.extract_cookies

    def counting(self: cookiejar.CookieJar, response: object, request: object) -> None:
        reads.append(1)
        original(self, response, request)  # type: ignore[arg-type]

    monkeypatch.setattr(cookiejar.CookieJar, "extract_cookies", counting)
    return reads


async def test_an_answer_without_set_cookie_is_not_read_for_cookies(jar_reads: list[int]) -> None:
    answers = Answers()
    async with MaasClient(
        URL, api_key=API_KEY, transport=httpx.MockTransport(answers), max_retries=0
    ) as maas:
        await maas.machines.get("abc")
        await maas.machines.get("abc")
    assert jar_reads == []
    assert answers.sent == [None, None]


async def test_a_cookie_maas_sets_is_kept_and_sent_back(jar_reads: list[int]) -> None:
    answers = Answers()
    async with MaasClient(
        URL, api_key=API_KEY, transport=httpx.MockTransport(answers), max_retries=0
    ) as maas:
        await maas.machines.get("abc")
        await maas.version()
        await maas.machines.get("abc")
    assert jar_reads == [1]  # the one answer that set cookies
    assert answers.sent[:2] == [None, None]
    assert answers.sent[2] is not None
    assert sorted(answers.sent[2].split("; ")) == ["csrftoken=abc", "sessionid=s1"]
