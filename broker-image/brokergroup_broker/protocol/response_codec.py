"""Responses of the client protocol (docs/protocol.md): encode and decode
every response body; framing is in `codec`, the shared field layout in `layout`.
Sans-I/O like `codec`: bytes in, typed values out."""

from __future__ import annotations

import struct
from itertools import repeat

from brokergroup_broker.protocol.codec import Frame, encode_frame
from brokergroup_broker.protocol.layout import (
    FLAG_RESPONSE,
    I16,
    I32,
    I32_PAIR,
    I64,
    I64_PAIR,
    I64_TRIPLE,
    MAX_STRING_BYTES,
    PULLED,
    SENT,
    LocalProtocolError,
    RemoteProtocolError,
    check_count,
    check_end,
    encode_opt_str,
    encode_props,
    encode_str,
    read_bytes,
    read_opt_str,
    read_props,
    read_str,
)
from brokergroup_broker.protocol.messages import (
    CommitResult,
    ConsumerOffsetResult,
    ErrorResponse,
    OffsetsResult,
    PulledMessage,
    PullResult,
    QueueCountResult,
    RequestCode,
    Response,
    ResponseCode,
    SendResult,
    SendRunResult,
    SentMessage,
)


def encode_response(request_id: int, response: Response) -> bytes:
    """The complete frame answering request `request_id`."""
    try:
        return _encode_response(request_id, response)
    except struct.error as exc:  # a number out of its field's range
        raise LocalProtocolError(f"cannot encode {type(response).__name__}: {exc}") from exc


def _encode_response(request_id: int, response: Response) -> bytes:
    if isinstance(response, ErrorResponse):
        message = response.message.encode()[:MAX_STRING_BYTES].decode(errors="ignore")
        parts = [
            b"",
            I16.pack(response.request_code),
            encode_str(message),
            encode_opt_str(response.master_address),
        ]
        return encode_frame(parts, request_id, response.code, FLAG_RESPONSE)
    parts = [b"", I16.pack(_RESPONSE_CODES[type(response)])]
    if isinstance(response, SendResult):
        msgs = response.messages
        parts.append(I32_PAIR.pack(response.master_epoch, len(msgs)))
        parts.extend([SENT.pack(m.queue_id, m.queue_offset, m.physical_offset) for m in msgs])
    elif isinstance(response, SendRunResult):
        phys = response.physical_offsets
        n = len(phys)
        first = response.first_queue_offset
        parts.append(I32_PAIR.pack(response.master_epoch, n))
        parts.append(
            b"".join(map(SENT.pack, repeat(response.queue_id, n), range(first, first + n), phys))
        )
    elif isinstance(response, PullResult):
        msgs2 = response.messages
        parts.append(
            I64_TRIPLE.pack(
                response.next_queue_offset, response.min_queue_offset, response.max_queue_offset
            )
        )
        parts.append(I32.pack(len(msgs2)))
        append = parts.append
        for p in msgs2:
            append(encode_str(p.topic))
            body = p.body
            append(
                PULLED.pack(
                    p.queue_id,
                    p.queue_offset,
                    p.physical_offset,
                    p.born_timestamp_ms,
                    p.store_timestamp_ms,
                    p.body_crc & 0xFFFFFFFF,
                    p.flag,
                    len(body),
                )
            )
            append(body)
            encode_props(parts, p.properties)
    elif isinstance(response, OffsetsResult):
        parts.append(I64_PAIR.pack(response.min_queue_offset, response.max_queue_offset))
    elif isinstance(response, QueueCountResult):
        parts.append(I32.pack(response.queue_count))
    elif isinstance(response, CommitResult):
        pass
    elif isinstance(response, ConsumerOffsetResult):
        parts.append(I64.pack(response.offset))
    else:  # pragma: no cover - exhaustive over Response
        raise LocalProtocolError(f"not a response: {response!r}")
    return encode_frame(parts, request_id, ResponseCode.SUCCESS, FLAG_RESPONSE)


def decode_response(frame: Frame) -> Response:
    """The typed response in `frame`; RemoteProtocolError if it is not one."""
    if not frame.is_response:
        raise RemoteProtocolError(f"response {frame.request_id}: a request frame was sent")
    try:
        return _decode_response(frame)
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(
            f"response {frame.request_id} (code {frame.code}): {exc}"
        ) from exc
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(
            f"response {frame.request_id} (code {frame.code}): malformed body: {exc}"
        ) from exc


def _decode_response(frame: Frame) -> Response:
    buf = frame.body
    (request_code,) = I16.unpack_from(buf, 0)
    pos = 2
    code = ResponseCode(frame.code)  # ValueError → RemoteProtocolError
    response: Response
    if code != ResponseCode.SUCCESS:
        message, pos = read_str(buf, pos)
        master, pos = read_opt_str(buf, pos)
        response = ErrorResponse(request_code, code, message, master)
    elif request_code == RequestCode.SEND_MESSAGES:
        epoch, count = I32_PAIR.unpack_from(buf, pos)
        pos += 8
        check_count(count, SENT.size, buf, pos, "result")
        unpack = SENT.unpack_from
        sent = []
        for _ in range(count):
            sent.append(SentMessage(*unpack(buf, pos)))
            pos += SENT.size
        response = SendResult(tuple(sent), epoch)
    elif request_code == RequestCode.PULL_MESSAGES:
        next_offset, min_offset, max_offset = I64_TRIPLE.unpack_from(buf, pos)
        pos += I64_TRIPLE.size
        (count,) = I32.unpack_from(buf, pos)
        pos += 4
        check_count(count, 2 + PULLED.size + 2, buf, pos, "message")
        pulled = []
        unpack_p = PULLED.unpack_from
        for _ in range(count):
            topic, pos = read_str(buf, pos)
            qid, qoff, poff, born, stored, crc, flag, blen = unpack_p(buf, pos)
            body, pos = read_bytes(buf, pos + PULLED.size, blen, "body")
            props, pos = read_props(buf, pos)
            pulled.append(
                PulledMessage(topic, qid, qoff, poff, body, props, born, stored, crc, flag)
            )
        response = PullResult(tuple(pulled), next_offset, min_offset, max_offset)
    elif request_code == RequestCode.QUERY_OFFSETS:
        low, high = I64_PAIR.unpack_from(buf, pos)
        pos += I64_PAIR.size
        response = OffsetsResult(low, high)
    elif request_code == RequestCode.TOPIC_QUEUE_COUNT:
        (count,) = I32.unpack_from(buf, pos)
        pos += 4
        response = QueueCountResult(count)
    elif request_code == RequestCode.COMMIT_CONSUMER_OFFSET:
        response = CommitResult()
    elif request_code == RequestCode.QUERY_CONSUMER_OFFSET:
        (offset,) = I64.unpack_from(buf, pos)
        pos += 8
        response = ConsumerOffsetResult(offset)
    else:
        raise RemoteProtocolError(f"success response to unknown request code {request_code}")
    check_end(buf, pos)
    return response


_RESPONSE_CODES: dict[type, RequestCode] = {
    SendResult: RequestCode.SEND_MESSAGES,
    SendRunResult: RequestCode.SEND_MESSAGES,
    PullResult: RequestCode.PULL_MESSAGES,
    OffsetsResult: RequestCode.QUERY_OFFSETS,
    QueueCountResult: RequestCode.TOPIC_QUEUE_COUNT,
    CommitResult: RequestCode.COMMIT_CONSUMER_OFFSET,
    ConsumerOffsetResult: RequestCode.QUERY_CONSUMER_OFFSET,
}
