"""The grader's wire format: plain data between the grading parent and the learner's process.

Nothing crosses the pipe as a pickle: a message is a JSON header plus raw byte buffers, so the
parent never runs code chosen by the learner's process while reading it. Values are encoded as
plain records -- an array is ``{"t": "array", "dtype", "shape", "buf"}`` (raw bytes, C order), a
number is a JSON number -- and :func:`decode` rebuilds them in the parent with ``np.frombuffer``
after checking the dtype against a short list and the byte length against the shape.

Frame: 8 bytes total length (big-endian), 4 bytes header length, the JSON header, the buffers.
"""
from __future__ import annotations

import json
import os
import select
import struct
import time

import numpy as np

MAX_MESSAGE = 1 << 30  # bytes; a larger frame is refused as garbage
DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")
MAX_DEPTH = 3  # tuples of arrays, e.g. (dq, dk, dv)


class WireError(Exception):
    """A message that is not a well-formed frame (the peer died, lied, or sent too much)."""


# ----------------------------------------------------------------------------- framing
def send(fd: int, header: dict, buffers: list = ()) -> None:
    """One frame; ``buffers`` are bytes or byte-cast memoryviews (len is their size in bytes)."""
    head = json.dumps(dict(header, sizes=[len(b) for b in buffers])).encode()
    total = 4 + len(head) + sum(len(b) for b in buffers)
    view = memoryview(struct.pack(">QI", total, len(head)) + head)
    for chunk in [view, *map(memoryview, buffers)]:
        while len(chunk):
            n = os.write(fd, chunk[: 1 << 20])
            chunk = chunk[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    parts, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def recv(fd: int, timeout: float | None = None, max_bytes: int = MAX_MESSAGE) -> tuple[dict, list[bytes]]:
    """One message of at most ``max_bytes``: (header dict, buffers). TimeoutError, EOFError or WireError otherwise."""
    deadline = None if timeout is None else time.monotonic() + timeout
    total, head_len = struct.unpack(">QI", _read_exact(fd, 12, deadline))
    if total > min(max_bytes, MAX_MESSAGE) or head_len > total - 4 or head_len > 1 << 24:
        raise WireError(f"a message of {total} bytes (header {head_len}) refused: more than "
                        f"{min(max_bytes, MAX_MESSAGE)}")
    try:
        header = json.loads(_read_exact(fd, head_len, deadline))
    except RecursionError:  # nested deeper than the parser's stack: not a header of ours
        raise WireError("a message header nested too deeply") from None
    sizes = header.get("sizes") if isinstance(header, dict) else None
    if (not isinstance(sizes, list) or not all(type(s) is int and s >= 0 for s in sizes)
            or sum(sizes) != total - 4 - head_len):
        raise WireError("buffer sizes do not add up to the frame length")
    return header, [_read_exact(fd, s, deadline) for s in sizes]


# ----------------------------------------------------------------------------- values
def encode(value, buffers: list, depth: int = 0) -> dict:
    """Plain record of ``value`` (arrays, torch tensors, numbers, str, None, tuples of these).

    Runs in the learner's process: what it produces is checked again by :func:`decode`.
    """
    if value is None or isinstance(value, (bool, np.bool_)):
        return dict(t="none") if value is None else dict(t="bool", v=bool(value))
    if isinstance(value, (int, np.integer)):
        return dict(t="int", v=str(int(value)))
    if isinstance(value, (float, np.floating)):
        return dict(t="float", v=repr(float(value)))
    if isinstance(value, str):
        return dict(t="str", v=value[:1000])
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        t = value.detach().cpu()
        # a copy taken now: a kernel's output is what the launch check saw, whatever runs before the send
        value = t.float().numpy() if str(t.dtype) == "torch.bfloat16" else t.numpy().copy()
        return dict(encode(np.asarray(value), buffers, depth), tensor=True)
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value.view(np.ndarray))
        if str(array.dtype) not in DTYPES:
            return dict(t="other", type=f"ndarray of dtype {array.dtype}")
        # the array's own bytes, not a copy: a copy (of an input digested after the call, of the
        # returned value) would add its size to the peak memory the parent reads after the call
        buffers.append(memoryview(array.reshape(-1)).cast("B"))
        return dict(t="array", dtype=str(array.dtype), shape=[int(n) for n in array.shape], buf=len(buffers) - 1)
    if isinstance(value, (tuple, list)) and depth < MAX_DEPTH:
        return dict(t="tuple", items=[encode(v, buffers, depth + 1) for v in list(value)[:16]], n=len(value))
    return dict(t="other", type=type(value).__name__[:80])


class Opaque:
    """A value the learner's process could not send as plain data (described, never compared)."""

    def __init__(self, type_name: str):
        self.type_name = str(type_name)[:80]

    def __repr__(self) -> str:
        return f"<a {self.type_name} object>"


def decode(record, buffers: list[bytes], depth: int = 0):
    """Rebuild a value from its record; WireError for anything malformed."""
    if not isinstance(record, dict) or depth > MAX_DEPTH:
        raise WireError("malformed value record")
    t = record.get("t")
    if t == "none":
        return None
    if t == "bool":
        return bool(record.get("v"))
    if t == "int":
        text = str(record.get("v"))
        if len(text) > 400:
            raise WireError("integer too long")
        return int(text)
    if t == "float":
        return float(str(record.get("v")))
    if t == "str":
        return str(record.get("v"))[:1000]
    if t == "array":
        dtype, shape, index = record.get("dtype"), record.get("shape"), record.get("buf")
        if dtype not in DTYPES or not isinstance(shape, list) or len(shape) > 8:
            raise WireError(f"array of dtype {dtype!r} refused")
        if not all(type(n) is int and n >= 0 for n in shape) or type(index) is not int \
                or not 0 <= index < len(buffers):
            raise WireError("array shape or buffer index malformed")
        data = buffers[index]
        if len(data) != int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize:
            raise WireError(f"array of shape {tuple(shape)} {dtype} has {len(data)} bytes")
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if t == "tuple":
        items = record.get("items")
        if not isinstance(items, list):
            raise WireError("malformed tuple record")
        return tuple(decode(r, buffers, depth + 1) for r in items)
    if t == "other":
        return Opaque(record.get("type", "?"))
    raise WireError(f"unknown value type {t!r}")


def encode_kwargs(kwargs: dict) -> tuple[dict, list[bytes]]:
    buffers: list[bytes] = []
    return {name: encode(value, buffers) for name, value in kwargs.items()}, buffers


def decode_kwargs(records: dict, buffers: list[bytes]) -> dict:
    return {str(name): decode(record, buffers) for name, record in records.items()}
