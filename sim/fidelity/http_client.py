"""A small asyncio HTTP/1.1 client: GET a page, POST JSON and read a server-sent-event stream.

Only what `sim observe` needs from an OpenAI-compatible server (vLLM, SGLang): one connection
per request (`Connection: close`), bodies with Content-Length, chunked transfer encoding or read
to the end, and `data:` lines of an event stream as they arrive. Stdlib only, so measuring a
server adds no dependency. http:// only: a TLS endpoint is refused in one line (put the client
next to the server, or tunnel).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 << 10
MAX_BODY_BYTES = 32 << 20


class HttpError(Exception):
    """The server could not be reached, refused the request or broke the connection (one line)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where the server is: host, port and the path prefix of its API (e.g. '' or '/proxy')."""

    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme != "http":
            raise HttpError(f"{url}: only http:// URLs are supported (got {parts.scheme}://)")
        if not parts.hostname:
            raise HttpError(f"{url}: no host name")
        try:
            port = parts.port or 80
        except ValueError:
            raise HttpError(f"{url}: bad port") from None
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        return cls(parts.hostname, port, prefix)

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}{self.prefix}"


async def _open(ep: Endpoint, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        return await asyncio.wait_for(asyncio.open_connection(ep.host, ep.port, limit=MAX_HEADER_BYTES), timeout)
    except TimeoutError:
        raise HttpError(f"{ep.base}: no answer within {timeout:g} s") from None
    except OSError as exc:
        raise HttpError(f"{ep.base}: cannot connect ({exc.strerror or exc})") from None


def _request_bytes(ep: Endpoint, method: str, path: str, body: bytes | None) -> bytes:
    head = [f"{method} {ep.prefix}{path} HTTP/1.1", f"Host: {ep.host}:{ep.port}", "Connection: close",
            "Accept: */*", "User-Agent: kvsim-observe"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + (body or b"")


async def _read_head(reader: asyncio.StreamReader, where: str) -> tuple[int, dict[str, str]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        raise HttpError(f"{where}: the server closed the connection before answering") from None
    except asyncio.LimitOverrunError:
        raise HttpError(f"{where}: response headers too large") from None
    lines = raw.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise HttpError(f"{where}: not an HTTP response ({lines[0][:60]!r})") from None
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return status, headers


async def _body_chunks(reader: asyncio.StreamReader, headers: dict[str, str], where: str) -> AsyncIterator[bytes]:
    """The body as it arrives, whatever the framing."""
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = await reader.readexactly(size + 2)
                yield data[:-2]
        elif "content-length" in headers:
            yield await reader.readexactly(int(headers["content-length"]))
        else:
            while chunk := await reader.read(65536):
                yield chunk
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.LimitOverrunError):
        raise HttpError(f"{where}: the connection was dropped mid-response") from None


async def _read_all(reader: asyncio.StreamReader, headers: dict[str, str], where: str) -> bytes:
    out = bytearray()
    async for chunk in _body_chunks(reader, headers, where):
        out += chunk
        if len(out) > MAX_BODY_BYTES:
            raise HttpError(f"{where}: response larger than {MAX_BODY_BYTES} bytes")
    return bytes(out)


def _error_text(body: bytes) -> str:
    """The server's own reason, from an OpenAI-style error body when it has one."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            err = obj.get("error", obj)
            msg = err.get("message") if isinstance(err, dict) else err
            text = str(msg or obj.get("detail") or text)
    except json.JSONDecodeError:
        pass
    return " ".join(text.split())[:200]


async def get(ep: Endpoint, path: str, timeout: float = 10.0) -> bytes:
    """The body of a GET (raises HttpError on a status other than 200)."""
    where = f"{ep.base}{path}"
    reader, writer = await _open(ep, timeout)
    try:
        writer.write(_request_bytes(ep, "GET", path, None))
        await writer.drain()
        status, headers = await asyncio.wait_for(_read_head(reader, where), timeout)
        body = await asyncio.wait_for(_read_all(reader, headers, where), timeout)
    except (TimeoutError, ConnectionError) as exc:
        raise HttpError(f"{where}: {'no answer in time' if isinstance(exc, TimeoutError) else 'connection lost'}") from None
    finally:
        writer.close()
    if status != 200:
        raise HttpError(f"{where}: HTTP {status}: {_error_text(body)}", status)
    return body


async def post_events(ep: Endpoint, path: str, payload: dict[str, Any], connect_timeout: float = 10.0,
                      ) -> AsyncIterator[dict[str, Any]]:
    """POST JSON and yield each `data:` event of the streamed answer as a dict, as it arrives.

    Ends at `data: [DONE]` or the end of the stream; a status other than 200, a dropped
    connection or an event that is not JSON raise HttpError."""
    where = f"{ep.base}{path}"
    reader, writer = await _open(ep, connect_timeout)
    try:
        writer.write(_request_bytes(ep, "POST", path, json.dumps(payload).encode()))
        await writer.drain()
        status, headers = await _read_head(reader, where)
        if status != 200:
            body = await _read_all(reader, headers, where)
            raise HttpError(f"HTTP {status}: {_error_text(body)}", status)
        buf = b""
        async for chunk in _body_chunks(reader, headers, where):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                try:
                    event = json.loads(data)
                except json.JSONDecodeError:
                    raise HttpError(f"{where}: an event that is not JSON ({data[:60]!r})") from None
                if isinstance(event, dict):
                    yield event
    except ConnectionError:
        raise HttpError(f"{where}: the connection was dropped mid-response") from None
    finally:
        writer.close()
