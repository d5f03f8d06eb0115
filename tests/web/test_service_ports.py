"""The servers a test session starts are its own, even when another process took the port
it found free (tests run in several processes)."""

from __future__ import annotations

import socket

from tests.conftest import free_port, listens


def test_a_stomp_server_whose_port_is_taken_moves_to_another(service, monkeypatch):
    """Before, the fixture took a connection accepted on the port for its STOMP server's,
    and the tests spoke to whatever listened there (here a plain socket) while the server
    had died on its bind."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        # the conftest module pytest loaded (importing it again would make another copy)
        found_free = type(service).start_stomp.__globals__
        monkeypatch.setitem(found_free, "free_port", lambda: next(ports, None) or free_port())
        port = service.start_stomp("stomp-port-taken")
        try:
            assert port != taken
            assert listens(service.processes["stomp-port-taken"].pid, port)
            with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
                client.sendall(b"CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
                answer = client.recv(9)  # the squatter would never answer: a timeout
                assert answer.startswith((b"CONNECTED", b"ERROR")), answer
        finally:
            service.stop("stomp-port-taken")
