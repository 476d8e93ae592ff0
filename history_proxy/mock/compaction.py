"""The mock's Responses compaction, as a profile: an upstream that has it (OpenAI's API) or one that lacks it.

With compaction (``create_mock_app(compaction=True)``, the default): ``POST /v1/responses/compact``
answers a ``response.compaction`` whose ``output`` is the user's message items and one ``compaction``
item with this mock's own ``encrypted_content`` (:data:`SEALED`), ``context_management`` is accepted,
and a ``compaction`` item in ``input`` must carry content this mock sealed (OpenAI refuses content it
cannot decrypt, such as another service's handle). Without it: ``/v1/responses/compact`` is a 404,
``context_management`` an unknown parameter and a ``compaction`` item an invalid ``input`` type, each
in OpenAI's shape, as a Responses server that does not implement compaction answers.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from history_proxy.mock.common import digest_of, error_answer

SEALED = "gAAAAmock-sealed."
"""How this mock's ``encrypted_content`` starts."""


def compaction_refusal(body: dict[str, Any], has_compaction: bool) -> Response | None:
    """OpenAI's 400 for what a Responses request asks of compaction that this profile cannot give."""
    if "context_management" in body and not has_compaction:
        return error_answer(
            400,
            "Unknown parameter: 'context_management'.",
            param="context_management",
            code="unknown_parameter",
        )
    items = body.get("input")
    for n, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict) or item.get("type") != "compaction":
            continue
        if not has_compaction:
            return error_answer(
                400,
                "Invalid value: 'compaction'. Supported values are: 'message', 'function_call', ...",
                param=f"input[{n}].type",
                code="invalid_value",
            )
        content = item.get("encrypted_content")
        if not isinstance(content, str) or not content.startswith(SEALED):
            return error_answer(
                400,
                "The encrypted content could not be verified.",
                param=f"input[{n}].encrypted_content",
                code="invalid_encrypted_content",
            )
    return None


async def compact(request: Request, has_compaction: bool) -> Response:
    """``POST /v1/responses/compact``: the user's messages and a sealed ``compaction`` item (or a 404)."""
    if not has_compaction:
        return error_answer(404, f"mock: no route POST {request.url.path}", code="unknown_url")
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        return error_answer(400, f"mock: the request body is not valid JSON ({exc})")
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return error_answer(
            400, "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    refused = compaction_refusal(body, has_compaction)
    if refused is not None:
        return refused
    items = body.get("input")
    items = [{"type": "message", "role": "user", "content": items}] if isinstance(items, str) else items
    items = items if isinstance(items, list) else []
    users = [
        i
        for i in items
        if isinstance(i, dict) and i.get("type", "message") == "message" and i.get("role") == "user"
    ]
    digest = digest_of(body)
    item = {"type": "compaction", "id": f"cmp_mock_{digest[:16]}", "encrypted_content": SEALED + digest}
    tokens = max(1, len(json.dumps(items)) // 4)
    return JSONResponse(
        {
            "id": f"resp_mock_{digest[:16]}",
            "object": "response.compaction",
            "created_at": int(time.time()),
            "model": body["model"],
            "output": [*users, item],
            "usage": {
                "input_tokens": tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 16,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens + 16,
            },
        }
    )
