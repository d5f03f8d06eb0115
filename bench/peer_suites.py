"""The peers' own STOMP test suites against Xump, and against the local RabbitMQ to compare.

    python bench/peer_suites.py --stomppy PATH --rabbitmq PATH [--only xump|rabbitmq]
                                [--stomppy-lib PATH] [--test-libs PATH] [--xump-port PORT]

--stomppy: a checkout of github.com/jasonrbriggs/stomp.py; its broker tests (`tests/`:
test_basic, test_s10, test_s11, test_s12, test_nonascii, test_threading, test_context,
test_override_threading; not test_timeout, which dials an address outside this machine)
run with that checkout's own `stomp` package, configured as its tests read it: STD_HOST,
STD_PORT, STD_USER, STD_PASSWORD (for Xump: any login, an API token as the password). Two
of them (test_basic's test_default_to_localhost and test_host_bind_port) dial STOMP's
default address, localhost:61613, as RabbitMQ's guest: against Xump a `sitecustomize` in a
temporary directory sends those connections to Xump's port, and RABBITMQ_USER and
RABBITMQ_PASSWORD give them the token (without it they would test whatever broker listens
on 61613, the local RabbitMQ, or fail when none does).

--rabbitmq: a checkout of github.com/rabbitmq/rabbitmq-server; the Python tests of its
STOMP plugin (`deps/rabbitmq_stomp/test/python_SUITE_data/src/`), the nine generic
modules (parsing, errors, connect_disconnect, ack, destinations, redelivered, reliability,
transactions, unsubscribe), configured by STOMP_PORT, with the stomp.py their
requirements.txt pins (8.2.0: give its directory with --stomppy-lib, e.g. from `pip install
--target DIR --no-deps stomp.py==8.2.0`). Their tests connect as RabbitMQ's default user,
`guest`/`guest`, written into the tests; against Xump a `sitecustomize` in a temporary
directory puts the API token where they send the passcode `guest` (nothing else changes).
Two of them (parsing's test_broadcast, connect_disconnect's test_default_user) run
`rabbitmqctl` from RABBITMQCTL, which only RabbitMQ's own harness sets: they fail against
either broker here (and test_broadcast would count the local RabbitMQ's bindings).

Xump is started as deployed: a private redis-server (AOF, appendfsync always), the ASGI
server, a Celery worker that routes, and `manage.py stomp_server` (tests/web/conftest.py's
start_service, as bench/stomp_bench.py does), with an API token holding every right, and
one setting raised: XUMP_MAX_BODY to 17 MiB (PEER_MAX_BODY), as RabbitMQ's own harness for
these tests (test/python_SUITE.erl) raises its STOMP `max_frame_size` to 17 MiB for
destinations' test_send_multiple_with_a_large_message (16 MiB bodies): neither broker takes
them by default (Xump's bodies 1 MiB, RabbitMQ's frames 4 MiB). The
local RabbitMQ's STOMP plugin is on 127.0.0.1:61613 (`rabbitmq-plugins enable
rabbitmq_stomp`); when it does not answer, its column is left out.

Each test file runs in its own pytest process (`-p no:cacheprovider`, a JUnit XML report);
the script prints run / passed / failed / errors / skipped per file and broker, and the
names of the tests that did not pass, each with the first words of its failure.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.stomp_bench import start_stomp_server
from tests.conftest import RedisServer
from tests.web.conftest import start_service

PYTHON = sys.executable
HOST = "127.0.0.1"
RABBIT_STOMP = 61613
STOMPPY_FILES = (
    "test_basic", "test_s10", "test_s11", "test_s12", "test_nonascii", "test_threading",
    "test_context", "test_override_threading",
)  # fmt: skip
RABBIT_MODULES = (
    "parsing", "errors", "connect_disconnect", "ack", "destinations", "redelivered",
    "reliability", "transactions", "unsubscribe",
)  # fmt: skip
RABBIT_SRC = "deps/rabbitmq_stomp/test/python_SUITE_data/src"
PER_FILE_TIMEOUT = 900
# RabbitMQ's harness: `max_frame_size, 17 * 1024 * 1024` (python_SUITE.erl); see the doc
PEER_MAX_BODY = 17 * 1024 * 1024

# put the token where the RabbitMQ suite sends guest's passcode (stomp.py and raw sockets)
SITECUSTOMIZE = """
import os, socket
_token = os.environ["XUMP_PEER_TOKEN"]
_send, _sendall = socket.socket.send, socket.socket.sendall
def _swap(data):
    if isinstance(data, (bytes, bytearray)) and b"passcode:guest\\n" in data:
        data = bytes(data).replace(b"passcode:guest\\n", b"passcode:" + _token.encode() + b"\\n")
    return data
socket.socket.send = lambda self, data, *a: _send(self, _swap(data), *a)
socket.socket.sendall = lambda self, data, *a: _sendall(self, _swap(data), *a)
"""

# send what dials STOMP's default address, localhost:61613, to Xump's port (stomp.py's
# test_default_to_localhost and test_host_bind_port, which log in with RabbitMQ's
# guest/guest: RABBITMQ_USER and RABBITMQ_PASSWORD give them the token)
REDIRECT = """
import os, socket
_port = int(os.environ["XUMP_PEER_PORT"])
_connect = socket.socket.connect
def _redirected(self, address):
    if isinstance(address, tuple) and address[0] in ("127.0.0.1", "::1", "localhost") \
            and address[1] == 61613:
        address = (address[0], _port, *address[2:])
    return _connect(self, address)
socket.socket.connect = _redirected
"""


def run_file(cwd: Path, target: str, env: dict[str, str], report: Path, *more: str) -> dict:
    """One test file in its own pytest process: its counts and the names that failed."""
    command = [PYTHON, "-m", "pytest", target, "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", "-o", "addopts=", *more]  # fmt: skip
    try:
        subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=PER_FILE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"run": 0, "passed": 0, "failed": 0, "errors": 1, "skipped": 0,
                "not passed": [f"{target}: timed out after {PER_FILE_TIMEOUT} s"]}  # fmt: skip
    if not report.exists():
        return {"run": 0, "passed": 0, "failed": 0, "errors": 1, "skipped": 0,
                "not passed": [f"{target}: no report (collection failed?)"]}  # fmt: skip
    counts = {"run": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0, "not passed": []}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        counts["run"] += 1
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
        outcome = [child.tag for child in case]
        if "skipped" in outcome:
            counts["skipped"] += 1
        elif "failure" in outcome or "error" in outcome:
            counts["failed" if "failure" in outcome else "errors"] += 1
            problem = next(child for child in case if child.tag in ("failure", "error"))
            reason = " ".join((problem.get("message") or "").split())[:160]
            counts["not passed"].append(f"{name}: {reason}" if reason else name)
        else:
            counts["passed"] += 1
    return counts


def stomppy_suite(checkout: Path, port: int, user: str, password: str, work: Path,
                  libs: Path | None = None) -> dict:  # fmt: skip
    path = [str(checkout)] + ([str(libs)] if libs else [])
    env = {**os.environ, "STD_HOST": HOST, "STD_PORT": str(port), "STD_USER": user,
           "STD_PASSWORD": password}  # fmt: skip
    if port != RABBIT_STOMP:  # Xump: what dials the default address reaches it too
        shim = work / "redirect"
        shim.mkdir(exist_ok=True)
        (shim / "sitecustomize.py").write_text(REDIRECT)
        path.insert(0, str(shim))
        env.update(XUMP_PEER_PORT=str(port), RABBITMQ_USER=user, RABBITMQ_PASSWORD=password)
    env["PYTHONPATH"] = os.pathsep.join(path)
    return {
        # test_timeout dials 192.0.2.0, an address outside this machine
        name: run_file(
            checkout,
            f"tests/{name}.py",
            env,
            work / f"stomppy-{name}.xml",
            "-k",
            "not test_timeout",
        )
        for name in STOMPPY_FILES
    }


def rabbit_suite(checkout: Path, port: int, lib: Path | None, token: str | None,
                 work: Path) -> dict:  # fmt: skip
    src = checkout / RABBIT_SRC
    path = [str(src)] + ([str(lib)] if lib else [])
    if token is not None:
        shim = work / "shim"
        shim.mkdir(exist_ok=True)
        (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
        path.insert(0, str(shim))
    env = {**os.environ, "STOMP_PORT": str(port), "PYTHONPATH": os.pathsep.join(path)}
    if token is not None:
        env["XUMP_PEER_TOKEN"] = token
    return {
        name: run_file(src, f"{name}.py", env, work / f"rabbit-{name}-{port}.xml")
        for name in RABBIT_MODULES
    }


def answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def print_table(title: str, results: dict[str, dict]) -> None:
    brokers = list(results)
    files = list(next(iter(results.values())))
    print(f"\n{title}")
    header = f"{'file':<26}" + "".join(f"{b + ' run/pass/fail/err/skip':>36}" for b in brokers)
    print(header)
    totals = {b: [0, 0, 0, 0, 0] for b in brokers}
    for name in files:
        row = f"{name:<26}"
        for broker in brokers:
            c = results[broker][name]
            numbers = [c["run"], c["passed"], c["failed"], c["errors"], c["skipped"]]
            totals[broker] = [t + n for t, n in zip(totals[broker], numbers, strict=True)]
            row += f"{'/'.join(map(str, numbers)):>36}"
        print(row)
    print(f"{'total':<26}" + "".join(f"{'/'.join(map(str, totals[b])):>36}" for b in brokers))
    for broker in brokers:
        missed = [t for c in results[broker].values() for t in c["not passed"]]
        if missed:
            print(f"  not passed on {broker} (each with the first words of its failure):")
            for line in missed:
                print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stomppy", type=Path, help="a checkout of jasonrbriggs/stomp.py")
    parser.add_argument("--rabbitmq", type=Path, help="a checkout of rabbitmq/rabbitmq-server")
    parser.add_argument("--stomppy-lib", type=Path, help="a directory holding stomp.py 8.2.0")
    parser.add_argument(
        "--test-libs", type=Path, help="a directory holding pytest-mock, which stomp.py's tests use"
    )
    parser.add_argument("--only", choices=("xump", "rabbitmq"))
    parser.add_argument("--xump-port", type=int, default=61623)
    args = parser.parse_args()
    if args.stomppy is None and args.rabbitmq is None:
        parser.error("give --stomppy, --rabbitmq or both")
    stomppy: dict[str, dict] = {}
    rabbit: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="xump-peers-") as temporary:
        work = Path(temporary)
        if args.only != "rabbitmq":
            (work / "redis").mkdir()
            (work / "service").mkdir()
            redis_server = RedisServer(work / "redis", "--appendfsync", "always")
            redis_server.start()
            service = None
            try:
                service = start_service(
                    redis_server.url, work / "service", "worker", XUMP_MAX_BODY=str(PEER_MAX_BODY)
                )
                service.start_worker()
                start_stomp_server(service, args.xump_port, work / "service")
                token = service.admin_token
                if args.stomppy:
                    stomppy["Xump"] = stomppy_suite(
                        args.stomppy, args.xump_port, "xump", token, work, args.test_libs
                    )
                if args.rabbitmq:
                    rabbit["Xump"] = rabbit_suite(
                        args.rabbitmq, args.xump_port, args.stomppy_lib, token, work
                    )
            finally:
                if service is not None:
                    service.close()
                redis_server.stop()
        if args.only != "xump" and answers(RABBIT_STOMP):
            if args.stomppy:
                stomppy["RabbitMQ"] = stomppy_suite(
                    args.stomppy, RABBIT_STOMP, "guest", "guest", work, args.test_libs
                )
            if args.rabbitmq:
                rabbit["RabbitMQ"] = rabbit_suite(
                    args.rabbitmq, RABBIT_STOMP, args.stomppy_lib, None, work
                )
    if stomppy:
        print_table("stomp.py's broker tests (tests/)", stomppy)
    if rabbit:
        print_table(f"RabbitMQ's STOMP plugin tests ({RABBIT_SRC})", rabbit)


if __name__ == "__main__":
    main()
