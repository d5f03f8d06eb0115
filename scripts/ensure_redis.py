"""Make sure the Redis server of XUMP_REDIS_URL answers (used by `make run`).

    python scripts/ensure_redis.py start [--var DIR]
    python scripts/ensure_redis.py stop [--var DIR]

`start` uses the server at XUMP_REDIS_URL (default redis://127.0.0.1:6379/0) when it
answers a PING. Otherwise, for a local URL, it starts `redis-server` from PATH on the URL's
port, daemonized, with its data under DIR/redis/ (default var/redis/; AOF on with an fsync
before every answer, `appendfsync always`, as SPEC §7 promises: a 202 is on disk) and notes
its pid in DIR/redis/started.pid. A Redis that already answers is used as it is, with a
warning when its settings do not keep that promise (/api/health reports the same). Without
redis-server it stops with the command that installs it. `stop` shuts down the server that
`start` started (the one whose pid started.pid holds) and nothing else.

Exit status 0 when Redis answers (start) or is stopped (stop); 1 with one line on stderr
otherwise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

DEFAULT_URL = "redis://127.0.0.1:6379/0"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
INSTALL = "sudo apt-get install redis-server"


class Refused(Exception):
    """Why Redis cannot be had; printed as one line."""


def _client(url: str) -> redis.Redis:
    # no retries: a server that is not there should be known at once
    return redis.Redis.from_url(
        url, socket_connect_timeout=1, socket_timeout=5, retry=Retry(NoBackoff(), 0)
    )


def _shown(url: str) -> str:
    """The URL without its password, for messages."""
    parsed = urlparse(url)
    if parsed.password is None:
        return url
    netloc = parsed.netloc.replace(f":{parsed.password}@", ":***@")
    return parsed._replace(netloc=netloc).geturl()


def _answers(url: str) -> int | None:
    """The pid of the Redis server at `url`, or None when nothing answers there."""
    try:
        with _client(url) as client:
            return int(client.info("server")["process_id"])
    except redis.AuthenticationError as error:  # a ConnectionError, but someone answered
        raise Refused(f"Redis at {_shown(url)} answers but refuses: {error}") from None
    except (redis.ConnectionError, redis.TimeoutError):
        return None
    except redis.RedisError as error:  # it answers, but refuses us (password, ...)
        raise Refused(f"Redis at {_shown(url)} answers but refuses: {error}") from None


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for init to reap it does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _durability_warning(url: str) -> str:
    """A warning line when the Redis at `url` does not fsync every write ("" when it does)."""
    try:
        with _client(url) as client:
            found = client.config_get("append*")
    except redis.RedisError as error:
        return f"\nwarning: cannot read its persistence settings ({error})"
    if found.get("appendonly") == "yes" and found.get("appendfsync") == "always":
        return ""
    return (
        f"\nwarning: its appendonly is {found.get('appendonly')!r} and appendfsync "
        f"{found.get('appendfsync')!r}: a publish answered 202 may be lost if Redis dies "
        "(set appendonly yes and appendfsync always)"
    )


def start(url: str, var: Path) -> str:
    directory = var / "redis"
    marker = directory / "started.pid"
    running = _answers(url)
    if running is not None:
        if marker.exists() and marker.read_text().strip() != str(running):
            marker.unlink()  # a server we started once is gone; this one is someone else's
        ours = " (started by an earlier make run: stopped when this one ends)"
        said = f"Redis answers at {_shown(url)}" + (ours if marker.exists() else "")
        return said + _durability_warning(url)
    parsed = urlparse(url)
    if parsed.scheme != "redis" or (parsed.hostname or "127.0.0.1") not in LOCAL_HOSTS:
        raise Refused(
            f"nothing answers at XUMP_REDIS_URL={_shown(url)}, and a redis-server can only be "
            "started here for redis://127.0.0.1:<port>"
        )
    program = shutil.which("redis-server")
    if program is None:
        raise Refused(
            f"no Redis answers at {_shown(url)} and redis-server is not installed: {INSTALL}"
            " (or set XUMP_REDIS_URL to a Redis server that answers)"
        )
    port = parsed.port or 6379
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "redis.log"
    command = [
        program, "--port", str(port), "--bind", "127.0.0.1", "-::1",
        "--dir", str(directory.resolve()), "--appendonly", "yes",
        "--appendfsync", "always", "--save", "", "--daemonize", "yes",
        "--pidfile", str((directory / "redis.pid").resolve()),
        "--logfile", str(log.resolve()),
    ]  # fmt: skip
    if parsed.password:
        command += ["--requirepass", unquote(parsed.password)]
    started = subprocess.run(command, capture_output=True, text=True)
    deadline = time.monotonic() + 10
    pid = None
    while started.returncode == 0 and time.monotonic() < deadline:
        pid = _answers(url)
        if pid is not None:
            break
        time.sleep(0.05)
    if pid is None:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        why = (tail[0] if tail else started.stderr.strip()) or "no reason given"
        raise Refused(f"redis-server did not start on port {port}: {why}")
    marker.write_text(f"{pid}\n")
    return (
        f"Started redis-server (pid {pid}) at {_shown(url)}, data in {directory}/ "
        "(stopped when make run ends)"
    )


def stop(url: str, var: Path) -> str:
    marker = var / "redis" / "started.pid"
    if not marker.exists():
        return "no redis-server of ours to stop"
    pid = int(marker.read_text().strip() or 0)
    try:
        ours = bool(pid) and _answers(url) == pid
    except Refused:
        ours = False
    if not ours:  # not answering there: stop it if it is still the redis-server we started
        try:
            ours = bool(pid) and b"redis-server" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            ours = False
    if ours:
        os.kill(pid, signal.SIGTERM)  # Redis writes its AOF out, then exits
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    marker.unlink(missing_ok=True)
    return f"Stopped redis-server (pid {pid})" if ours else "our redis-server had stopped"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--var", default="var", type=Path, help="data directory (var/)")
    options = parser.parse_args(argv)
    url = os.environ.get("XUMP_REDIS_URL") or DEFAULT_URL
    try:
        said = (start if options.action == "start" else stop)(url, options.var)
    except Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    print(said)
    return 0


if __name__ == "__main__":
    sys.exit(main())
