"""The service's SQLite database with several writers at once.

Each shard's router, the web process and the STOMP server write the wiring; a router's
transaction reads, then writes. With SQLite's default (deferred) transactions two such
transactions deadlock on upgrading their read locks and SQLite answers one of them at once
with "database is locked", which the API passed on as "the router could not apply it"
(a fresh-clone CI run of the shards' service test). The database the settings make from
DATABASE_URL must let such writers wait their turn instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WRITERS = """
import json, sys, threading
import django
django.setup()
from django.db import connection, connections, transaction

with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE counter (k INTEGER PRIMARY KEY, v INTEGER)")
    cursor.execute("INSERT INTO counter VALUES (1, 0)")
errors = []

def write(times):
    try:
        for _ in range(times):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT v FROM counter WHERE k = 1")
                (value,) = cursor.fetchone()
                cursor.execute("UPDATE counter SET v = %s WHERE k = 1", [value + 1])
    except Exception as error:
        errors.append(repr(error))
    finally:
        connections.close_all()

threads = [threading.Thread(target=write, args=(40,)) for _ in range(6)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
with connection.cursor() as cursor:
    cursor.execute("SELECT v FROM counter")
    print(json.dumps({"count": cursor.fetchone()[0], "errors": errors[:3]}))
"""


def test_read_then_write_transactions_from_many_threads_wait_their_turn(tmp_path):
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="xumpweb.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'wiring.sqlite3'}",
        XUMP_SECRET_KEY="tests",
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run([sys.executable, "-c", WRITERS], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer == {"count": 240, "errors": []}
