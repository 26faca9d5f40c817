"""``reservedips/`` answers have MAAS 3.7.3's keys. MAAS ships no API example for this handler (its
``api/examples/`` has none), so the key set is read from the handler itself: ``DISPLAYED_RESERVEDIP_FIELDS``
in ``src/maasserver/api/reservedip.py`` l.14-20 at tag 3.7.3 (``id``, ``ip``, ``subnet``, ``mac_address``,
``comment``) plus the ``resource_uri`` every Piston handler adds; the nested ``subnet`` is MAAS's subnet
object, checked against the shape table derived from MAAS's own examples."""

from __future__ import annotations

from typing import Any

import httpx
from shapes import check, load_table
from test_shapes import BASE, PlainText, rich_simulator

DISPLAYED_RESERVEDIP_FIELDS = {"id", "ip", "subnet", "mac_address", "comment"}


async def test_reservedip_answers_have_the_handlers_fields() -> None:
    sim = rich_simulator()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=sim.app), base_url=BASE, auth=PlainText()
    ) as c:
        created = await c.post(
            "reservedips/", data={"ip": "10.40.0.50", "mac_address": "52:54:00:aa:bb:cc", "comment": "x"}
        )
        assert created.status_code == 200, created.text
        one: dict[str, Any] = created.json()
        listed = (await c.get("reservedips/")).json()
        read = (await c.get(f"reservedips/{one['id']}/")).json()
    for answer in (one, *listed, read):
        assert set(answer) == DISPLAYED_RESERVEDIP_FIELDS | {"resource_uri"}, answer
    report = check("subnet", load_table(), [one["subnet"], read["subnet"]])
    assert not report.problems, report.problems
