"""`make run`'s plumbing: the Redis it ensures and the processes its Procfile names.

`make run` itself blocks until Ctrl-C, so it is tried by hand (README: Two commands); these
run the pieces it is made of."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from honcho.environ import parse_procfile
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


def ensure_redis(action: str, var: Path, url: str, path: str | None = None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("XUMP_")}
    env["XUMP_REDIS_URL"] = url
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "scripts/ensure_redis.py", action, "--var", str(var)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def answers(port: int) -> bool:
    try:
        client = redis.Redis(port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
        return client.ping()
    except redis.ConnectionError:
        return False


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie that init has not reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.fixture
def redis_installed():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")


def test_it_starts_a_redis_server_with_its_data_under_var_and_stops_it(tmp_path, redis_installed):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    started = ensure_redis("start", tmp_path, url)
    try:
        assert started.returncode == 0, started.stderr
        assert "Started redis-server" in started.stdout
        assert answers(port)
        config = redis.Redis(port=port).config_get("*")
        assert Path(config["dir"]) == (tmp_path / "redis").resolve()
        assert config["appendonly"] == "yes" and config["appendfsync"] == "always"
        assert (tmp_path / "redis" / "appendonlydir").is_dir()
        pid = int((tmp_path / "redis" / "started.pid").read_text())
        assert pid == redis.Redis(port=port).info("server")["process_id"]

        again = ensure_redis("start", tmp_path, url)  # answers now: used as it is
        assert again.returncode == 0 and "Redis answers" in again.stdout
    finally:
        stopped = ensure_redis("stop", tmp_path, url)
    assert stopped.returncode == 0, stopped.stderr
    assert not answers(port)
    assert not (tmp_path / "redis" / "started.pid").exists()
    assert not running(pid)


def test_it_uses_a_redis_that_answers_and_never_stops_it(tmp_path, redis_server):
    used = ensure_redis("start", tmp_path, redis_server.url)
    assert used.returncode == 0, used.stderr
    assert "Redis answers" in used.stdout
    assert not (tmp_path / "redis").exists()
    stopped = ensure_redis("stop", tmp_path, redis_server.url)
    assert stopped.returncode == 0
    assert answers(redis_server.port)


def test_it_names_the_apt_command_when_redis_server_is_missing(tmp_path):
    url = f"redis://127.0.0.1:{free_port()}/0"
    missing = ensure_redis("start", tmp_path, url, path=str(tmp_path))
    assert missing.returncode == 1
    assert "sudo apt-get install redis-server" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1  # one line, no traceback


def test_it_refuses_to_start_a_server_for_a_remote_url(tmp_path):
    missing = ensure_redis("start", tmp_path, "rediss://127.0.0.1:1/0")
    assert missing.returncode == 1
    assert "can only be started here" in missing.stderr


def test_the_procfile_names_web_worker_and_beat():
    processes = parse_procfile((ROOT / "Procfile").read_text()).processes
    assert set(processes) == {"web", "worker", "beat"}
    assert processes["web"].startswith("uvicorn xumpweb.asgi:application --host ")
    assert "--port " in processes["web"]
    assert processes["worker"].startswith("celery -A xumpweb worker --pool threads")
    assert processes["beat"].startswith("celery -A xumpweb beat --schedule var/")
