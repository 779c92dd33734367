"""A browser-free Streamlit client: one visitor's session over the app's websocket, for bench_server.py.

It speaks what the browser speaks to a real `streamlit run` server: protobuf BackMsg / ForwardMsg
frames on /_stcore/stream, file uploads by HTTP PUT to /_stcore/upload_file (with the XSRF cookie
and header), widget values as WidgetStates. One script run = send a rerun, read frames until
`script_finished`; its latency on loopback is the server's time for that run. What the page
showed is kept as a flat list of elements (type, label, text), enough to find widgets by label and
to read errors; nothing is rendered.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import requests
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.Common_pb2 import UploadedFileInfo
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.asyncio.client import connect

ERROR_TYPES = ("exception", "alert")  # an alert is an error only when its format is ERROR


@dataclass
class Element:
    kind: str  # the proto's oneof name: "number_input", "markdown", "alert", ...
    widget_id: str = ""
    label: str = ""
    text: str = ""
    is_error: bool = False


@dataclass
class RunResult:
    seconds: float
    status: str  # ScriptFinishedStatus name
    elements: list[Element] = field(default_factory=list)
    frames: int = 0
    bytes_in: int = 0

    def errors(self) -> list[str]:
        return [e.text for e in self.elements if e.is_error]

    def widget(self, kind: str, label_starts: str) -> Element:
        for e in self.elements:
            if e.kind == kind and e.label.startswith(label_starts):
                return e
        raise LookupError(f"no {kind} labelled {label_starts!r} on the page "
                          f"(widgets: {[(e.kind, e.label) for e in self.elements if e.widget_id]})")

    def has_text(self, part: str) -> bool:
        return any(part in e.text or part in e.label for e in self.elements)


def _element(delta: Any) -> Element | None:
    if delta.WhichOneof("type") != "new_element":
        return None
    el = delta.new_element
    kind = el.WhichOneof("type") or ""
    body = getattr(el, kind, None)
    if body is None:
        return None
    widget_id = getattr(body, "id", "") if isinstance(getattr(body, "id", ""), str) else ""
    label = getattr(body, "label", "") if isinstance(getattr(body, "label", ""), str) else ""
    text = ""
    for name in ("body", "message", "text"):
        value = getattr(body, name, None)
        if isinstance(value, str) and value:
            text = value
            break
    is_error = kind == "exception" or (kind == "alert" and body.format == body.ERROR)
    return Element(kind, widget_id, label, text, is_error)


class Session:
    """One visitor: `await Session.open(base_url)`, then `run(...)` per script run, `upload(...)`."""

    def __init__(self, base_url: str, ws: Any, xsrf: str, cookie: str) -> None:
        self.base_url = base_url
        self._ws = ws
        self._xsrf = xsrf
        self._cookie = cookie
        self.session_id = ""
        self.pages: dict[str, str] = {}  # url path -> page script hash
        self.widgets: dict[str, WidgetState] = {}  # the states this visitor has set, sent with every run
        self._page_hash = ""

    @classmethod
    async def open(cls, base_url: str) -> Session:
        """GET the health endpoint (where the browser gets its XSRF cookie before connecting), then the websocket."""
        response = await asyncio.to_thread(requests.get, base_url + "/_stcore/health", timeout=30)
        response.raise_for_status()
        xsrf = response.cookies.get("_streamlit_xsrf", "")
        cookie = SimpleCookie()
        cookie["_streamlit_xsrf"] = xsrf
        ws_url = base_url.replace("http", "ws", 1) + "/_stcore/stream"
        ws = await connect(ws_url, subprotocols=["streamlit", xsrf], origin=base_url,  # type: ignore[list-item]
                           additional_headers={"Cookie": cookie.output(header="", attrs=[]).strip()},
                           max_size=None, open_timeout=60, ping_interval=None)
        return cls(base_url, ws, xsrf, cookie.output(header="", attrs=[]).strip())

    async def close(self) -> None:
        await self._ws.close()

    async def run(self, page: str = "", query: str = "", timeout_s: float = 600) -> RunResult:
        """One script run of `page` (a URL path; "" = the page on screen) with this visitor's widgets."""
        start = time.perf_counter()
        await self.send_rerun(page, query)
        result = await self.read(lambda r: False, timeout_s)
        result.seconds = time.perf_counter() - start
        return result

    async def send_rerun(self, page: str = "", query: str = "") -> None:
        """Ask for a script run, as a browser does after a click (a run in progress is interrupted)."""
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = query
        if page:
            self._page_hash = self.pages.get(page, "")
            state.page_name = page
        state.page_script_hash = self._page_hash
        state.widget_states.widgets.extend(self.widgets.values())
        await self._ws.send(msg.SerializeToString())

    async def read(self, stop: Callable[[RunResult], bool], timeout_s: float = 600) -> RunResult:
        """Frames until the script run finishes, or until stop(what has arrived so far) is true
        (then `status` is "" and the run goes on)."""
        result = RunResult(0.0, "")
        while not stop(result):
            raw = await asyncio.wait_for(self._ws.recv(), timeout_s)
            result.frames += 1
            result.bytes_in += len(raw)
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if kind == "new_session":
                self.session_id = fwd.new_session.initialize.session_id or self.session_id
            elif kind == "navigation":
                self.pages = {p.url_pathname: p.page_script_hash for p in fwd.navigation.app_pages}
                self._page_hash = fwd.navigation.page_script_hash or self._page_hash
            elif kind == "delta":
                element = _element(fwd.delta)
                if element is not None:
                    result.elements.append(element)
            elif kind == "script_finished":
                result.status = ForwardMsg.ScriptFinishedStatus.Name(fwd.script_finished)
                if result.status != "FINISHED_EARLY_FOR_RERUN":
                    return result
        return result

    def set_number(self, element: Element, value: float) -> None:
        self.widgets[element.widget_id] = WidgetState(id=element.widget_id, double_value=value)

    def set_text(self, element: Element, value: str) -> None:
        self.widgets[element.widget_id] = WidgetState(id=element.widget_id, string_value=value)

    def click(self, element: Element) -> None:
        """A button press: a trigger for the next run only (the browser resets it after that run)."""
        self.widgets[element.widget_id] = WidgetState(id=element.widget_id, trigger_value=True)

    def unclick(self, element: Element) -> None:
        self.widgets.pop(element.widget_id, None)

    async def upload(self, uploader: Element, path: Path) -> None:
        """What the browser does for st.file_uploader: ask for an upload URL, PUT the file, set the widget."""
        msg = BackMsg()
        msg.file_urls_request.request_id = uuid.uuid4().hex
        msg.file_urls_request.file_names.append(path.name)
        msg.file_urls_request.session_id = self.session_id
        await self._ws.send(msg.SerializeToString())
        while True:
            fwd = ForwardMsg()
            fwd.ParseFromString(await asyncio.wait_for(self._ws.recv(), 60))
            if fwd.WhichOneof("type") == "file_urls_response":
                break
        if fwd.file_urls_response.error_msg:
            raise RuntimeError(f"upload refused: {fwd.file_urls_response.error_msg}")
        urls = fwd.file_urls_response.file_urls[0]
        data = path.read_bytes()
        put_url = urls.upload_url if urls.upload_url.startswith("http") else self.base_url + urls.upload_url

        def put() -> None:
            response = requests.put(put_url, files={"file": (path.name, data)}, timeout=120,
                                    headers={"X-Xsrftoken": self._xsrf, "Cookie": self._cookie})
            response.raise_for_status()

        await asyncio.to_thread(put)
        state = WidgetState(id=uploader.widget_id)
        info = UploadedFileInfo(name=path.name, size=len(data), file_id=urls.file_id)
        info.file_urls.CopyFrom(urls)
        state.file_uploader_state_value.uploaded_file_info.append(info)
        self.widgets[uploader.widget_id] = state
