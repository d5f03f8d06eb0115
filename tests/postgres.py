"""Where tests find PostgreSQL: XUMP_TEST_POSTGRES_URL, or the local server if it answers."""

from __future__ import annotations

import os
from functools import cache

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


@cache
def postgres_url() -> str | None:
    url = os.environ.get("XUMP_TEST_POSTGRES_URL", DEFAULT_URL)
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=2) as connection:
            connection.execute("SELECT 1")
    except Exception:
        return None
    return url
