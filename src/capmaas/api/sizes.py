"""Disk sizes written as ``20``, ``"20"``, ``"20G"``, ``"20GB"`` or ``"20Gi"``: one schema, one parser.

MAAS takes VM disk and storage-pool sizes in gigabytes (10^9 bytes, ``storage=root:20``), while the LXD design
(seed 003) writes ``size: "20"`` and the Go provider writes ``storageSize: "50"``; both are strings. The CRD
accepts an integer (gigabytes) or a string with an optional unit and rejects anything else at admission with
a CEL message; :func:`gigabytes` turns any accepted value into whole gigabytes, rounding binary units *up* so
that a VM never gets less disk than was asked for (``20Gi`` is 21.47 GB, so 22).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Final

from pydantic import AfterValidator, Field, StringConstraints

from capmaas.api.schema import cel, schema_extra

__all__ = ["MAX_GB", "SIZE_UNITS", "DiskSize", "InvalidSize", "gigabytes"]

#: The largest size accepted, in GB (64 TB).
MAX_GB: Final = 65536

#: Units a string size may end with, and how many gigabytes (10^9 bytes) one of them is.
SIZE_UNITS: Final[dict[str, float]] = {
    "": 1.0,
    "G": 1.0,
    "GB": 1.0,
    "Gi": 1.073741824,
    "GiB": 1.073741824,
    "T": 1000.0,
    "TB": 1000.0,
    "Ti": 1099.511627776,
    "TiB": 1099.511627776,
}

_SIZE_RE: Final = re.compile(r"^([0-9]{1,6})(G|GB|Gi|GiB|T|TB|Ti|TiB)?$")
_CEL_PATTERN: Final = "^[0-9]{1,6}(G|GB|Gi|GiB|T|TB|Ti|TiB)?$"
_HELP: Final = (
    'a whole number of gigabytes such as 20, "20", "20G", "20GB" or "20Gi" (also T, TB, Ti, TiB), '
    f"from 1 GB to {MAX_GB} GB"
)
# The CEL twin of gigabytes(): the factor of the unit the string ends with (longest suffixes first).
_CEL_FACTOR: Final = (
    "(self.endsWith('TiB') || self.endsWith('Ti') ? 1099.511627776"
    " : self.endsWith('TB') || self.endsWith('T') ? 1000.0"
    " : self.endsWith('GiB') || self.endsWith('Gi') ? 1.073741824 : 1.0)"
)


class InvalidSize(ValueError):
    """A size that is neither an integer of gigabytes nor a number with one of :data:`SIZE_UNITS`."""


def gigabytes(value: int | str) -> int:
    """Whole gigabytes (10^9 bytes) for a size as the CRD accepts it; binary units are rounded up.

    >>> gigabytes(20), gigabytes("20"), gigabytes("20G"), gigabytes("20GB"), gigabytes("20Gi")
    (20, 20, 20, 20, 22)
    """
    if isinstance(value, bool):
        raise InvalidSize(f"size {value!r} must be {_HELP}")
    if isinstance(value, int):
        gb = value
    else:
        match = _SIZE_RE.match(value)
        if match is None:
            raise InvalidSize(f"size {value!r} must be {_HELP}")
        number, unit = match.groups()
        gb = math.ceil(int(number) * SIZE_UNITS[unit or ""] - 1e-9)
    if not 1 <= gb <= MAX_GB:
        raise InvalidSize(f"size {value!r} is {gb} GB; it must be {_HELP}")
    return gb


def _checked(value: str) -> str:
    gigabytes(value)  # the same rule as the CEL one, so a body parsed in Python cannot hold junk either
    return value


_SIZE_RULE: Final = cel(
    f"type(self) == int || (self.matches('{_CEL_PATTERN}')"
    f" && double(int(self.find('^[0-9]+'))) * {_CEL_FACTOR} >= 1.0"
    f" && double(int(self.find('^[0-9]+'))) * {_CEL_FACTOR} <= {MAX_GB}.0)",
    f"must be {_HELP}",
)

#: A size in GB: an integer, or a string with an optional unit (see :func:`gigabytes`). Junk is refused at
#: admission by a CEL rule with a message that shows the accepted forms.
DiskSize = Annotated[
    Annotated[int, Field(ge=1, le=MAX_GB)]
    | Annotated[str, StringConstraints(max_length=16, pattern=_CEL_PATTERN), AfterValidator(_checked)],
    Field(json_schema_extra=schema_extra({"x-kubernetes-int-or-string": True}, rules=[_SIZE_RULE])),
]
