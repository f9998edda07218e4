"""HTTP plumbing of the controller's app: reply helpers (a `ControllerError` as its JSON
answer) and the headers of forwarding."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from brokergroup_controller.api import ReplicaInfo
from brokergroup_controller.errors import ControllerError, ErrorCode, http_status

log = logging.getLogger(__name__)


FORWARDED_HEADER = "X-Brokergroup-Forwarded-By"


LEADER_HEADER = "X-Brokergroup-Leader"


def json_answer(status: int, body: dict[str, Any], leader_api: str | None = None) -> web.Response:
    headers = {LEADER_HEADER: leader_api} if leader_api else None
    return web.json_response(body, status=status, headers=headers)


def error_body(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code.value, "message": message, **details}


def refusal_answer(exc: ControllerError, leader_api: str | None = None) -> web.Response:
    """A service refusal as the HTTP API answers it: the code's status, and a body of the
    code, message and details (a ReplicaInfo detail in its JSON form)."""
    details = {
        name: value.to_json() if isinstance(value, ReplicaInfo) else value
        for name, value in exc.details.items()
    }
    return json_answer(
        http_status(exc.code), error_body(exc.code, exc.message, **details), leader_api
    )
