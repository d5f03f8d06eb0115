"""The fields of a message that a MATCH condition or a `target_from` reads (SPEC §12).

Theory of operation: a field is named by text when a selector is configured, and read from
many messages afterwards, so the name is checked and turned into a reader once
(`field_reader`), never per message. The forms:

* `"address"`, `"return_address"`: the envelope's fields;
* `"header:<name>"`: the header `<name>` (any valid header name, even "address");
* a bare header name that is not an envelope field: that header (as before SPEC §12).

`check_field` returns the canonical form that the catalog keeps: a header whose name is not
an envelope field is kept bare (so wiring saved before §12 reads the same), and a header
whose bare name would be read otherwise keeps its `header:` prefix: one named like an
envelope field (`"header:address"`) and one whose name starts with `header:` itself
(`"header:header:x"` is the header `header:x`, never the header `x`). `header_name` takes
off exactly one prefix, so the canonical form reads the header it was given for.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.errors import InvalidSelector
from engine.message import Message
from engine.validation import check_header_name

ENVELOPE_FIELDS = ("address", "return_address")
HEADER_PREFIX = "header:"


def header_text(value: object) -> str | None:
    """How a header value looks to a MATCH on that header (and to a `target_from`)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_field(field: object) -> str:
    """The canonical form of a field name; InvalidSelector for one that is neither an
    envelope field nor a valid header name."""
    if not isinstance(field, str):
        raise InvalidSelector(f"field must be a string, not {type(field).__name__}")
    if field in ENVELOPE_FIELDS:
        return field
    name = field[len(HEADER_PREFIX) :] if field.startswith(HEADER_PREFIX) else field
    try:
        check_header_name(name)
    except Exception as exc:  # InvalidArgument: said again as a selector's mistake
        raise InvalidSelector(
            f"field {field[:60]!r} is not 'address', 'return_address', 'header:<name>' or a "
            f"header name: {exc}"[:400]
        ) from None
    # kept bare, `name` would read as an envelope field or lose its own `header:` prefix
    return field if name in ENVELOPE_FIELDS or name.startswith(HEADER_PREFIX) else name


def header_name(field: str) -> str | None:
    """The header a canonical field reads, None for an envelope field."""
    if field in ENVELOPE_FIELDS:
        return None
    return field[len(HEADER_PREFIX) :] if field.startswith(HEADER_PREFIX) else field


def field_reader(field: str) -> Callable[[Message], str | None]:
    """A function giving a message's value of the canonical `field` as text (None when the
    message has no such field)."""
    if field == "address":
        return _address
    if field == "return_address":
        return _return_address
    name = header_name(field)

    def read(message: Message) -> str | None:
        return header_text(message.headers.get(name))

    return read


def _address(message: Message) -> str | None:
    return message.address


def _return_address(message: Message) -> str | None:
    return message.return_address
