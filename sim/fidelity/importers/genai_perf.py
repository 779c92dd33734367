"""genai-perf's profile export JSON (`--profile-export-file`, written by perf_analyzer; genai-perf 0.0.x).

{"service_kind": "openai", "endpoint": "v1/completions", "experiments": [{"experiment": {...},
"requests": [{"timestamp": ns, "request_inputs": {"payload": "<JSON body>"}, "response_timestamps":
[ns, ...], "response_outputs": [{"response": "data: {...}"}, ...]}]}]}. For each request: send =
timestamp; the streamed chunks whose text (choices[].text or choices[].delta.content) is not empty
are tokens: first token = the first such chunk's time, last token = the last one's. Tokens: the
`usage` chunk (prompt_tokens, completion_tokens) when the server sent one; else the prompt's
length when it was token ids, else its characters / 4 (an assumption, named), and one output
token per content chunk (vLLM streams one token per chunk unless told otherwise). A request with
no content chunk is a failure. Triton's kind (`text_output`) counts non-empty outputs the same
way. The first experiment is imported.
"""

from __future__ import annotations

import json
from typing import Any

from sim.fidelity.importers.base import Imported, number
from sim.fidelity.run_record import RunError

NAME = "genai-perf"
DESCRIPTION = "genai-perf / perf_analyzer profile_export.json (experiments[].requests[])"
CHARS_PER_TOKEN = 4


def detect(obj: Any) -> bool:
    if not isinstance(obj, dict) or not isinstance(obj.get("experiments"), list) or not obj["experiments"]:
        return False
    first = obj["experiments"][0]
    reqs = first.get("requests") if isinstance(first, dict) else None
    return isinstance(reqs, list) and (not reqs or isinstance(reqs[0], dict) and "response_timestamps" in reqs[0])


def _chunk(output: Any) -> tuple[str, dict[str, Any]]:
    """(the chunk's generated text, its usage or {})."""
    if not isinstance(output, dict):
        return "", {}
    if "text_output" in output:
        return str(output.get("text_output") or ""), {}
    raw = str(output.get("response") or "").strip()
    text, usage = "", {}  # type: tuple[str, dict[str, Any]]
    for line in raw.splitlines():
        line = line.strip().removeprefix("data:").strip()
        if not line or line == "[DONE]":
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(ev, dict):
            continue
        for ch in ev.get("choices") or []:
            if isinstance(ch, dict):
                delta: dict[str, Any] = ch["delta"] if isinstance(ch.get("delta"), dict) else {}
                text += str(ch.get("text") or delta.get("content") or "")
        if isinstance(ev.get("usage"), dict):
            usage = ev["usage"]
    return text, usage


def _prompt_tokens(req: dict[str, Any], imp: Imported) -> int | None:
    inputs: dict[str, Any] = req["request_inputs"] if isinstance(req.get("request_inputs"), dict) else {}
    payload = inputs.get("payload")
    try:
        body: Any = json.loads(payload) if isinstance(payload, str) else {}
    except json.JSONDecodeError:
        body = {}
    prompt = body.get("prompt") if isinstance(body, dict) else None
    if prompt is None and isinstance(body, dict) and isinstance(body.get("messages"), list):
        prompt = " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    if prompt is None:
        prompt = inputs.get("text_input")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, str) and prompt:
        imp.assumed["input_tokens"] = (f"prompts are text and the server sent no usage: {CHARS_PER_TOKEN} "
                                       "characters per token")
        return max(1, round(len(prompt) / CHARS_PER_TOKEN))
    return None


def parse(obj: dict[str, Any], name: str) -> Imported:
    imp = Imported(NAME)
    if len(obj["experiments"]) > 1:
        imp.assumed["experiment"] = f"the first of {len(obj['experiments'])} experiments"
    for i, req in enumerate(obj["experiments"][0]["requests"]):
        where = f"{name}: experiments[0].requests[{i}]"
        if not isinstance(req, dict):
            raise RunError(f"{where}: expected an object")
        times, outputs = req.get("response_timestamps"), req.get("response_outputs") or []
        if not isinstance(times, list) or not isinstance(outputs, list) or len(times) != len(outputs):
            raise RunError(f"{where}: response_timestamps and response_outputs must be lists of the same length")
        send = number(req.get("timestamp"), "timestamp", where) / 1e9
        token_times: list[float] = []
        usage: dict[str, Any] = {}
        for t, out in zip(times, outputs, strict=True):
            text, u = _chunk(out)
            usage = u or usage
            if text:
                token_times.append(number(t, "response_timestamps", where) / 1e9)
        if not token_times:
            imp.failed += 1
            continue
        n_in = usage.get("prompt_tokens") or _prompt_tokens(req, imp)
        if n_in is None:
            raise RunError(f"{where}: the input length is unknown (no usage, no prompt in request_inputs)")
        n_out = usage.get("completion_tokens") or len(token_times)
        if not usage:
            imp.assumed["output_tokens"] = "no usage chunk: one output token per streamed content chunk"
        imp.add(where, send, token_times[0], token_times[-1], n_in, n_out)
    return imp
