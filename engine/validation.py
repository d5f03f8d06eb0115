"""Checks on everything that enters the engine from outside: names, headers, bodies.

Each check raises the specific `XumpError` with a message a person can act on, before the
engine changes any state.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from engine.errors import InvalidArgument, InvalidName, MessageTooLarge
from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.message import HeaderValue

MAX_NAME = 200
RESERVED_PREFIX = "$"
DEFAULT_MAX_BODY = 8 * 1024 * 1024
# wiring numbers (a queue's limit and history, a selector's credit) are kept in the catalog's
# 32-bit integer columns (xumpweb/wiring/models.py); a seq is a 64-bit integer in every store
MAX_WIRING = 2**31 - 1
MAX_SEQ = 2**63 - 1


def _bad_character(name: str) -> str | None:
    for char in name:
        if char.isspace() or not char.isprintable():
            return char
    return None


def check_name(kind: str, name: object, *, allow_reserved: bool = False) -> str:
    """A queue, store or destination name: 1-200 characters, no whitespace or control
    characters; a leading `$` is reserved for the engine unless `allow_reserved`."""
    if not isinstance(name, str):
        raise InvalidName(f"{kind} name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidName(f"{kind} name must not be empty")
    if len(name) > MAX_NAME:
        raise InvalidName(f"{kind} name is {len(name)} characters long; the limit is {MAX_NAME}")
    bad = _bad_character(name)
    if bad is not None:
        raise InvalidName(
            f"{kind} name {name!r} contains {bad!r}; whitespace and control "
            "characters are not allowed"
        )
    if name.startswith(RESERVED_PREFIX) and not allow_reserved:
        raise InvalidName(f"{kind} name {name!r} starts with '$', which is reserved for the engine")
    return name


def check_header_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"header name must be a non-empty string, not {name!r}")
    if len(name) > MAX_NAME:
        raise InvalidArgument(f"header name {name[:40]!r}... is longer than {MAX_NAME} characters")
    first = name[0]
    if not (first.isalpha() or first == "_"):
        raise InvalidArgument(f"header name {name!r} must start with a letter or '_'")
    if _bad_character(name) is not None:
        raise InvalidArgument(f"header name {name!r} contains whitespace or control characters")
    return name


def check_headers(headers: object) -> Mapping[str, HeaderValue]:
    """Headers as a read-only mapping of scalar values."""
    if headers is None or headers is EMPTY_HEADERS:
        return EMPTY_HEADERS
    if not isinstance(headers, Mapping):
        raise InvalidArgument(f"headers must be a mapping, not {type(headers).__name__}")
    checked: dict[str, HeaderValue] = {}
    for name, value in headers.items():
        check_header_name(name)
        if not isinstance(value, str | int | float | bool):
            raise InvalidArgument(
                f"header {name!r} has a {type(value).__name__} value; header values must be "
                "str, int, float or bool"
            )
        checked[name] = value
    return MappingProxyType(checked) if checked else EMPTY_HEADERS


def check_body(body: object, max_body: int) -> bytes:
    if isinstance(body, bytes):
        data = body
    elif isinstance(body, str):
        data = body.encode("utf-8")
    elif isinstance(body, bytearray | memoryview):
        data = bytes(body)
    else:
        raise InvalidArgument(f"message body must be bytes or str, not {type(body).__name__}")
    if len(data) > max_body:
        raise MessageTooLarge(f"message body is {len(data)} bytes; the limit is {max_body} bytes")
    return data


def check_count(what: str, value: object, *, minimum: int, maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{what} must be an integer, not {value!r}"[:300])
    if value < minimum:
        raise InvalidArgument(f"{what} must be at least {minimum}, not {value}"[:300])
    if maximum is not None and value > maximum:
        raise InvalidArgument(f"{what} must be at most {maximum:,}, not {value}"[:300])
    return value


def check_optional_count(
    what: str, value: object, *, minimum: int, maximum: int | None = None
) -> int | None:
    return None if value is None else check_count(what, value, minimum=minimum, maximum=maximum)
