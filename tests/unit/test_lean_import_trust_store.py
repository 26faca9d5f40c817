"""``capmaas run`` imports kopf without aiohttp's fallback contexts loading the system trust store (issue 26,
start-up and memory): the fallback that verifies still refuses what it cannot verify, and every context made
after the import loads the trust store as before."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import ssl
before = ssl.create_default_context().cert_store_stats()
from capmaas.operator.main import _lean_imports
_lean_imports()
import aiohttp.connector as connector
verified, unverified = connector._SSL_CONTEXT_VERIFIED, connector._SSL_CONTEXT_UNVERIFIED
assert verified.cert_store_stats()["x509_ca"] == 0, verified.cert_store_stats()
assert unverified.cert_store_stats()["x509_ca"] == 0, unverified.cert_store_stats()
assert verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname, "verification kept"
assert ssl.create_default_context().cert_store_stats() == before, "trust store loads again after the import"
"""


def test_aiohttp_fallback_contexts_have_no_trust_store_and_still_verify() -> None:
    subprocess.run([sys.executable, "-c", CHECK], check=True)
