"""STOMP 1.2 for Xump (SPEC §9): a protocol core that does no I/O (`frames`, `connection`),
and, on top of it, the WebSocket and TCP transports."""
