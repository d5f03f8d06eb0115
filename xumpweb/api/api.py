"""The HTTP API under /api/ (django-ninja): OpenAPI 3 at /api/openapi.json, docs at /api/docs.

Endpoints live in one module per resource (queues, selectors, messages, patterns, tokens,
system); auth.py says who may do what, errors.py turns every failure into
`{"error": code, "detail": text}`. Every endpoint reaches the queues through
`xumpweb.runtime.service()`: publishes go to the store's durable inbox, everything else is
an operation the router runs and answers.

Queue names may contain ':' and '/' (path parameters use Django's `path` converter), so the
routes under /queues/<name>/... are registered before /queues/<name> itself.
"""

from __future__ import annotations

from typing import Any

from ninja import NinjaAPI

from xumpweb.api import (
    consumers,
    definitions,
    lineage,
    messages,
    operate,
    patterns,
    queues,
    selectors,
    system,
    tokens,
)
from xumpweb.api.auth import token_or_session
from xumpweb.api.errors import install, json_method_not_allowed
from xumpweb.api.jsonbody import DepthLimitedParser
from xumpweb.api.schemas import PublishBatchIn, PublishIn

DESCRIPTION = """Publish messages, browse history, wire queues and selectors, confirm and
reject deliveries. Authenticate with `Authorization: Bearer xump_...` (an API token with
publish / consume / manage rights per queue) or the console's session. Every error is
`{"error": code, "detail": text}`; see docs/api.md."""


class XumpApi(NinjaAPI):
    def get_openapi_schema(self, *args: Any, **kwargs: Any) -> Any:
        """Add the publish bodies, which the publish endpoints parse themselves."""
        schema = super().get_openapi_schema(*args, **kwargs)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (PublishIn, PublishBatchIn):
            found = model.model_json_schema(
                by_alias=True, ref_template="#/components/schemas/{model}"
            )
            components.update(found.pop("$defs", {}))
            components[model.__name__] = found
        _document_errors(schema)
        return schema


# what any operation may answer besides its own (errors.py): a malformed or out-of-range
# request, no or a bad token, no right, an unknown path (queue names hold '/', so a path
# may also reach a neighbouring route and meet its 405), a body too large; changes also
# meet conflicts
ERRORS_EVERYWHERE = {
    "400": "bad request: malformed JSON, wrong types, out of range",
    "401": "no valid token or session",
    "403": "the token or user lacks the right",
    "404": "no such queue, selector, pattern, token or path",
    "405": "the path exists for other methods",
    "413": "the request body is too large",
}
ERRORS_ON_CHANGE = {"409": "conflicts with what exists, or the queue is full"}


def _document_errors(schema: dict[str, Any]) -> None:
    """Every operation documents the API's error answers (the ErrorOut JSON body)."""
    error = {"$ref": "#/components/schemas/ErrorOut"}
    for methods in schema.get("paths", {}).values():
        for method, operation in methods.items():
            # endpoints declare their codes as ints; JSON keys are text: one key per code
            responses = {
                str(code): answer for code, answer in operation.get("responses", {}).items()
            }
            operation["responses"] = responses
            codes = dict(ERRORS_EVERYWHERE)
            if method in ("post", "put", "patch", "delete"):
                codes.update(ERRORS_ON_CHANGE)
            for code, description in codes.items():
                responses.setdefault(
                    code,
                    {"description": description,
                     "content": {"application/json": {"schema": error}}},
                )  # fmt: skip


api = XumpApi(
    title="Xump API",
    version="1",
    description=DESCRIPTION,
    auth=token_or_session,
    urls_namespace="api",
    parser=DepthLimitedParser(),
)
install(api)
# order matters: /queues/<name>/... before /queues/<name> (see the module doc)
for module in (messages, operate, selectors, lineage, queues, patterns, tokens, system,
               definitions, consumers):  # fmt: skip
    api.add_router("/", module.router)


def urls() -> tuple[list, str, str]:
    """api.urls, with ninja's plain-text 405 answers turned into JSON errors."""
    patterns_, app_name, namespace = api.urls
    for pattern in patterns_:
        if hasattr(pattern, "callback"):
            pattern.callback = json_method_not_allowed(pattern.callback)
    return patterns_, app_name, namespace
