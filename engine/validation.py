"""Checks on everything that enters the engine from outside: names, headers, bodies.

Each check raises the specific `XumpError` with a message a person can act on, before the
engine changes any state.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import isfinite
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
MAX_HEADERS = 1000  # headers on one message
# integer header values must fit 64 bits: what every JSON writer on the way (orjson in the
# relay and the WebSocket frames) and most readers can carry exactly
MIN_INT, MAX_INT = -(2**63), 2**64 - 1


def surrogate_at(text: str) -> int | None:
    """The index of the first lone surrogate in `text` (which UTF-8 cannot carry), or None."""
    if text.isascii():  # the common case, in C
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return error.start
    return None


def text_problem(text: str) -> str | None:
    """Why `text` cannot be carried as UTF-8 (a lone surrogate), or None. Says where and
    which code point, never the text itself: error messages are shown to people and kept
    in the refused-commands list."""
    at = surrogate_at(text)
    if at is None:
        return None
    return (
        f"holds a lone surrogate (U+{ord(text[at]):04X}) at index {at}; "
        "text must be valid Unicode (UTF-8 encodable)"
    )


def check_text(what: str, text: str) -> str:
    """Text that every later stage (JSON, Redis, WebSocket frames) can carry."""
    if not text.isascii():
        problem = text_problem(text)
        if problem is not None:
            raise InvalidArgument(f"{what} {problem}")
    return text


def shown(name: str) -> str:
    """A name as an error message may show it: short, and only when every character of
    it is printable (else only its length, so the message never carries hostile bytes)."""
    if not name.isprintable() or text_problem(name) is not None:
        return f"of {len(name)} characters"
    return repr(name[:40] + "..." if len(name) > 40 else name)


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


# Header names that passed check_header_name. Every message carries its headers' names
# again (a few names, over and over), and the router checks each message it routes: a set
# lookup instead of the character-by-character walk. Only names that passed go in, and the
# check depends on the name alone; bounded, so hostile traffic of ever new names costs
# memory no longer than KNOWN_NAMES entries (past that, names are checked every time).
_known_names: set[str] = set()
KNOWN_NAMES = 10_000


def check_header_name(name: object) -> str:
    if type(name) is str and name in _known_names:
        return name
    if not isinstance(name, str) or not name:
        raise InvalidArgument(
            f"header name must be a non-empty string, not {type(name).__name__}"
            if not isinstance(name, str)
            else "header name must be a non-empty string"
        )
    if len(name) > MAX_NAME:
        raise InvalidArgument(f"header name {shown(name)} is longer than {MAX_NAME} characters")
    first = name[0]
    if not (first.isalpha() or first == "_"):
        raise InvalidArgument(f"header name {shown(name)} must start with a letter or '_'")
    if _bad_character(name) is not None:
        raise InvalidArgument(
            f"header name {shown(name)} contains whitespace or control characters"
        )
    problem = text_problem(name)
    if problem is not None:
        raise InvalidArgument(f"header name {shown(name)} {problem}")
    if len(_known_names) < KNOWN_NAMES and type(name) is str:  # not a subclass's __eq__
        _known_names.add(name)
    return name


def _header_value_problem(value: object) -> str | None:
    """Why a header value cannot be carried everywhere (JSON, orjson, Redis), or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, int):
        if MIN_INT <= value <= MAX_INT:
            return None
        return "is an integer beyond 64 bits; send it as a string"
    if isinstance(value, float):
        return None if isfinite(value) else "is not a finite number"
    return f"has a {type(value).__name__} value; header values must be str, int, float or bool"


def check_headers(headers: object) -> Mapping[str, HeaderValue]:
    """Headers as a read-only mapping of scalar values."""
    if headers is None or headers is EMPTY_HEADERS:
        return EMPTY_HEADERS
    # the usual kinds first: the ABC's isinstance is slow, and the router checks every
    # message it routes
    if (
        type(headers) is not MappingProxyType
        and type(headers) is not dict
        and not isinstance(headers, Mapping)
    ):
        raise InvalidArgument(f"headers must be a mapping, not {type(headers).__name__}")
    if len(headers) > MAX_HEADERS:
        raise InvalidArgument(f"a message has {len(headers)} headers; the limit is {MAX_HEADERS}")
    checked: dict[str, HeaderValue] = {}
    for name, value in headers.items():
        check_header_name(name)
        problem = _header_value_problem(value)
        if problem is not None:
            raise InvalidArgument(f"header {shown(name)} {problem}")
        checked[name] = value
    return MappingProxyType(checked) if checked else EMPTY_HEADERS


def check_body(body: object, max_body: int) -> bytes:
    if isinstance(body, bytes):
        data = body
    elif isinstance(body, str):
        try:
            data = body.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(f"message body {text_problem(body)}") from None
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


def check_envelope(address: object, return_address: object) -> None:
    """A message's address and return address: text every later stage can carry."""
    if not isinstance(address, str):
        raise InvalidArgument(f"address must be a string, not {type(address).__name__}")
    if not address.isascii():
        check_text("address", address)
    if return_address is not None:
        if not isinstance(return_address, str):
            raise InvalidArgument(
                f"return_address must be a string or None, not {type(return_address).__name__}"
            )
        if not return_address.isascii():
            check_text("return_address", return_address)


# -- message lifetime (SPEC §8, docs/lifetime.md) ------------------------------------------
MAX_SECONDS = 10 * 365 * 24 * 3600.0  # ten years: beyond that a ttl or delay is a mistake
MAX_PRIORITIES = 10


def check_seconds(
    what: str, value: object, *, minimum: float = 0.0, maximum: float = MAX_SECONDS
) -> float:
    """A number of seconds: int or float, finite, within [minimum, maximum]."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidArgument(f"{what} must be a number of seconds, not {value!r}"[:300])
    if not isfinite(value):
        raise InvalidArgument(f"{what} must be a finite number of seconds, not {value!r}")
    if value < minimum:
        raise InvalidArgument(f"{what} must be at least {minimum:g} seconds, not {value!r}")
    if value > maximum:
        raise InvalidArgument(f"{what} must be at most {maximum:g} seconds, not {value!r}")
    return float(value)


def check_optional_seconds(what: str, value: object, *, minimum: float = 0.0) -> float | None:
    return None if value is None else check_seconds(what, value, minimum=minimum)


def check_priority(value: object) -> int:
    """The `priority` header: a whole number >= 0 (an int, an integral float, or digits as
    text, as STOMP and HTTP headers arrive); the queue clamps it to its levels."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, float) and isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(
            f"header 'priority' must be a whole number from 0 up, not {value!r}"[:300]
        )
    if value < 0:
        raise InvalidArgument(f"header 'priority' must be 0 or more, not {value}")
    return value


def check_lifetime_options(
    max_deliveries: object,
    redelivery_delay: object,
    redelivery_backoff: object,
    redelivery_delay_max: object,
    ttl: object,
    priorities: object,
) -> tuple[int | None, float | None, float, float | None, float | None, int]:
    """A queue's lifetime options (SPEC §8), checked together; all off by default."""
    max_deliveries = check_optional_count(
        "max_deliveries", max_deliveries, minimum=1, maximum=MAX_WIRING
    )
    delay = check_optional_seconds("redelivery_delay", redelivery_delay)
    if not isinstance(redelivery_backoff, int | float) or isinstance(redelivery_backoff, bool):
        raise InvalidArgument(
            f"redelivery_backoff must be a number >= 1, not {redelivery_backoff!r}"[:300]
        )
    if not isfinite(redelivery_backoff) or redelivery_backoff < 1 or redelivery_backoff > 1000:
        raise InvalidArgument(
            f"redelivery_backoff must be a number from 1 to 1000, not {redelivery_backoff!r}"
        )
    delay_max = check_optional_seconds("redelivery_delay_max", redelivery_delay_max)
    if delay is not None and delay_max is not None and delay_max < delay:
        raise InvalidArgument(
            f"redelivery_delay_max ({delay_max:g}) must not be below redelivery_delay ({delay:g})"
        )
    queue_ttl = check_optional_seconds("ttl", ttl)
    levels = check_count("priorities", priorities, minimum=1, maximum=MAX_PRIORITIES)
    return max_deliveries, delay, float(redelivery_backoff), delay_max, queue_ttl, levels
