"""Named result codes of controller requests (DESIGN.md §2.2, §2.4).

Every rejection carries one of these codes and a message a person can act
on; the HTTP layer maps them to status codes with `http_status`.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    SUCCESS = "SUCCESS"
    # Identity (persistent-broker-id seed).
    BROKER_ID_INVALID = "BROKER_ID_INVALID"
    NEED_TO_BE_REGISTERED = "NEED_TO_BE_REGISTERED"
    BROKER_SET_NOT_FOUND = "BROKER_SET_NOT_FOUND"
    # SyncStateSet / master fencing.
    INVALID_MASTER = "INVALID_MASTER"
    FENCED_MASTER_EPOCH = "FENCED_MASTER_EPOCH"
    FENCED_SYNC_STATE_SET_EPOCH = "FENCED_SYNC_STATE_SET_EPOCH"
    BROKER_NOT_ALIVE = "BROKER_NOT_ALIVE"
    INVALID_SYNC_STATE_SET = "INVALID_SYNC_STATE_SET"
    # Election.
    MASTER_STILL_EXIST = "MASTER_STILL_EXIST"
    MASTER_NOT_AVAILABLE = "MASTER_NOT_AVAILABLE"
    ELECT_TARGET_NOT_ELIGIBLE = "ELECT_TARGET_NOT_ELIGIBLE"
    # Admin.
    BROKER_STILL_ALIVE = "BROKER_STILL_ALIVE"
    # users (docs/security.md "Users with rights")
    USER_NOT_FOUND = "USER_NOT_FOUND"
    # Transport / service.
    BAD_REQUEST = "BAD_REQUEST"
    UNAUTHORIZED = "UNAUTHORIZED"
    FORBIDDEN = "FORBIDDEN"
    NOT_LEADER = "NOT_LEADER"
    COMMIT_TIMEOUT = "COMMIT_TIMEOUT"
    INTERNAL_ERROR = "INTERNAL_ERROR"


_HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.SUCCESS: 200,
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.BROKER_SET_NOT_FOUND: 404,
    ErrorCode.USER_NOT_FOUND: 404,
    ErrorCode.NOT_LEADER: 503,
    ErrorCode.COMMIT_TIMEOUT: 503,
    ErrorCode.INTERNAL_ERROR: 500,
}


def http_status(code: ErrorCode) -> int:
    """Rule rejections are 409 Conflict: the request was valid, the state said no."""
    return _HTTP_STATUS.get(code, 409)


class ControllerError(Exception):
    """A request the controller refused, with its code and actionable text."""

    def __init__(self, code: ErrorCode, message: str, **details: object) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details
