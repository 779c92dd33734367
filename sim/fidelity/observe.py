"""`sim observe`: replay a trace against a live OpenAI-compatible server (vLLM) and record the run.

Open loop: every request is sent at its trace arrival time (divided by `speedup`), whatever the
server is doing, unless `max_concurrency` bounds the requests in flight (then a request waits for
a slot and its send time says so). Each answer is streamed; per request the client keeps when it
was sent, the time of every generated token, the first and the last, the tokens in and out and
the error if it failed. Meanwhile /metrics is scraped once a second (sim/fidelity/prom.py). The
record (sim/fidelity/observe_record.py) is written as the run goes, so a stop at any point — the
last request, Ctrl-C, a server that dies — leaves what was measured, and failures are counted by
kind with one line printed per kind, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.fidelity import http_client as http
from sim.fidelity import prom
from sim.fidelity.observe_prompts import PlannedRequest, plan_requests
from sim.fidelity.observe_record import EngineGuess, RecordWriter, engine_meta
from sim.trace.model import TraceError

GONE_AFTER = 10  # consecutive requests that could not connect: the server is gone, stop sending


class ObserveError(TraceError):
    """The run cannot start (server unreachable, model not served, bad option): one line."""


@dataclass
class ObserveOptions:
    url: str
    model: str | None = None  # the model name sent in requests (None: the server's first)
    speedup: float = 1.0
    max_concurrency: int | None = None
    scrape_interval_s: float = 1.0
    request_timeout_s: float = 600.0
    seed: int = 0
    guess: EngineGuess = field(default_factory=EngineGuess)


@dataclass
class Outcome:
    """What happened, as meta.json's `observed` says it."""

    out: Path
    planned: int = 0
    sent: int = 0
    completed: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False
    server_gone: bool = False
    scrapes: int = 0
    scrape_failures: int = 0
    clamped: int = 0
    duration_s: float = 0.0

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def failure_kind(message: str, status: int | None) -> str:
    if status is not None:
        return "refused"
    if "cannot connect" in message or "no answer within" in message:
        return "unreachable"
    if "dropped" in message or "closed the connection" in message:
        return "dropped"
    return "error"


async def probe(ep: http.Endpoint, model: str | None) -> tuple[str, dict[str, Any], str]:
    """(served model name, its /v1/models entry, /metrics text or '') — or one ObserveError line."""
    import json

    try:
        listing = json.loads(await http.get(ep, "/v1/models"))
    except http.HttpError as exc:
        raise ObserveError(f"server not reachable: {exc}") from None
    except ValueError:
        raise ObserveError(f"{ep.base}/v1/models: not JSON (is this an OpenAI-compatible server?)") from None
    entries = [m for m in listing.get("data", []) if isinstance(m, dict) and "id" in m] if isinstance(listing, dict) else []
    if not entries:
        raise ObserveError(f"{ep.base}/v1/models: the server lists no model")
    ids = [str(m["id"]) for m in entries]
    if model is None:
        entry = entries[0]
    elif model in ids:
        entry = entries[ids.index(model)]
    else:
        raise ObserveError(f"model {model!r} is not served at {ep.base}: it serves {', '.join(ids)}")
    try:
        metrics = (await http.get(ep, "/metrics")).decode("utf-8", "replace")
    except http.HttpError:
        metrics = ""
    return str(entry["id"]), entry, metrics


class Observer:
    """One run: dispatcher, request tasks and the /metrics scraper sharing the writer."""

    def __init__(self, ep: http.Endpoint, served: str, plan: list[PlannedRequest], opts: ObserveOptions,
                 writer: RecordWriter, outcome: Outcome, say: Callable[[str], None],
                 progress: Callable[[Outcome], None] | None):
        self.ep, self.served, self.plan, self.opts = ep, served, plan, opts
        self.writer, self.outcome, self.say, self.progress = writer, outcome, say, progress
        self.stop = asyncio.Event()  # stop sending (Ctrl-C, the server gone, the end)
        self.abort = asyncio.Event()  # and stop waiting for the answers in flight (Ctrl-C)
        self.done = asyncio.Event()  # no request left: the scraper stops
        self.origin = 0.0
        self.said: set[str] = set()
        self.unreachable_run = 0
        self.counters: list[dict[str, float]] = []

    def now(self) -> float:
        return time.perf_counter() - self.origin

    async def run(self) -> None:
        self.origin = time.perf_counter()
        try:
            await self.scrape_once()  # the counters before anything is sent
        except (http.HttpError, TimeoutError):
            self.outcome.scrape_failures += 1
        scraper = asyncio.create_task(self.scrape_loop())
        try:
            await self.dispatch()
        finally:
            self.stop.set()
            self.done.set()
            await scraper
            with contextlib.suppress(http.HttpError, TimeoutError):
                await self.scrape_once()  # the counters after the last answer
            self.outcome.duration_s = self.now()

    async def dispatch(self) -> None:
        slots = asyncio.Semaphore(self.opts.max_concurrency) if self.opts.max_concurrency else None
        tasks: set[asyncio.Task] = set()
        try:
            for req in self.plan:
                due = req.arrival_s / self.opts.speedup
                if await self._wait(due - self.now()) or self.outcome.server_gone:
                    break
                if slots is not None:
                    acquired = asyncio.create_task(slots.acquire())
                    stopped = asyncio.create_task(self.stop.wait())
                    await asyncio.wait({acquired, stopped}, return_when=asyncio.FIRST_COMPLETED)
                    stopped.cancel()
                    if not acquired.done() or self.stop.is_set():
                        acquired.cancel()
                        break
                task = asyncio.create_task(self.one(req, due, slots))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if tasks:
                await self._drain(tasks, asyncio.create_task(self.abort.wait()))
        finally:
            for t in tasks:
                t.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _drain(self, tasks: set[asyncio.Task], stopped: asyncio.Task) -> None:
        """Wait for the requests in flight, or for Ctrl-C, whichever comes first."""
        while tasks and not self.abort.is_set():
            await asyncio.wait({*tasks, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()

    async def _wait(self, seconds: float) -> bool:
        """Sleep, or return True at once if the run is being stopped."""
        if seconds <= 0:
            return self.stop.is_set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()

    async def one(self, req: PlannedRequest, due: float, slots: asyncio.Semaphore | None) -> None:
        prompt = req.prompt
        payload = {"model": self.served, "prompt": prompt, "max_tokens": req.max_tokens, "ignore_eos": True,
                   "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True},
                   "return_token_ids": True}
        row: dict[str, Any] = {"request_id": f"observe-{req.rid}", "arrival_s": round(due, 6),
                               "input_toks": len(prompt), "max_tokens": req.max_tokens}
        token_ts: list[float] = []
        usage: dict[str, Any] = {}
        error, status, finish = None, None, None
        self.outcome.sent += 1
        row["queued_ts"] = self.now()
        try:
            async with asyncio.timeout(self.opts.request_timeout_s):
                async for ev in http.post_events(self.ep, "/v1/completions", payload):
                    t = self.now()
                    if "error" in ev:
                        err = ev["error"]
                        error = f"stream error: {err.get('message') if isinstance(err, dict) else err}"
                        break
                    for ch in ev.get("choices") or []:
                        ids = ch.get("token_ids")
                        n = len(ids) if isinstance(ids, list) else (1 if ch.get("text") else 0)
                        token_ts += [t] * n
                        finish = ch.get("finish_reason") or finish
                    if isinstance(ev.get("usage"), dict):
                        usage = ev["usage"]
        except http.HttpError as exc:
            error, status = str(exc), exc.status
        except TimeoutError:
            error = f"no complete answer within {self.opts.request_timeout_s:g} s"
        except asyncio.CancelledError:
            error = "interrupted before the answer ended"
        finally:
            if slots is not None:
                slots.release()
        if error is None and not token_ts:
            error = "the answer held no token"
        self.record(req, row, token_ts, usage, finish, error, status)

    def record(self, req: PlannedRequest, row: dict[str, Any], token_ts: list[float], usage: dict[str, Any],
               finish: str | None, error: str | None, status: int | None) -> None:
        token_ts = [round(t, 6) for t in token_ts]
        n_out = len(token_ts)
        if usage:
            row["usage_prompt_tokens"] = usage.get("prompt_tokens")
            row["usage_completion_tokens"] = usage.get("completion_tokens")
        row.update(output_toks=n_out, first_token_ts=token_ts[0] if token_ts else None,
                   last_token_ts=token_ts[-1] if token_ts else None, finish_reason=finish,
                   token_ts=token_ts, error=error)
        row["queued_ts"] = round(row["queued_ts"], 6)
        self.writer.request(row)
        if error is None:
            self.outcome.completed += 1
            self.unreachable_run = 0
        else:
            kind = "interrupted" if error.startswith("interrupted") else failure_kind(error, status)
            self.outcome.failures[kind] = self.outcome.failures.get(kind, 0) + 1
            if kind not in self.said:
                self.said.add(kind)
                self.say(f"request {req.rid} failed ({kind}): {error}; further {kind} failures are counted")
            self.unreachable_run = self.unreachable_run + 1 if kind == "unreachable" else 0
            if self.unreachable_run >= GONE_AFTER and not self.outcome.server_gone:
                self.outcome.server_gone = True
                self.say(f"{GONE_AFTER} requests in a row could not connect: the server is gone; stopping")
                self.stop.set()
        if self.progress is not None:
            self.progress(self.outcome)

    async def scrape_loop(self) -> None:
        """Once a second until the last answer (run() sets `done`)."""
        while not await self._wait_done(self.opts.scrape_interval_s):
            try:
                await self.scrape_once()
            except (http.HttpError, TimeoutError):
                self.outcome.scrape_failures += 1

    async def _wait_done(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.done.wait(), seconds)
        return self.done.is_set()

    async def scrape_once(self) -> None:
        text = (await http.get(self.ep, "/metrics", timeout=max(self.opts.scrape_interval_s * 2, 2.0))).decode(
            "utf-8", "replace")
        t = self.now()
        sample = prom.sample(text)
        self.writer.gauges(t, sample)
        self.counters.append({k: sample[k] for k in prom.COUNTERS})
        self.outcome.scrapes += 1


def _spec_for(guess: EngineGuess, served: str, entry: dict[str, Any]) -> tuple[Any, str | None]:
    """kvsim's ModelSpec of the served model when it can be found (--model-config, the served name,
    the server's own model directory when it is on this machine), and the reference that worked."""
    from models.spec import SpecError, load_spec

    for ref in (guess.model, served, entry.get("root")):
        if not ref:
            continue
        try:
            return load_spec(str(ref)), str(ref)
        except (SpecError, OSError, ValueError):
            if ref == guess.model:
                raise ObserveError(f"--model-config {ref}: not a model kvsim can read") from None
    return None, None


async def observe(trace, opts: ObserveOptions, out: str | Path, *, say: Callable[[str], None] = print,
                  progress: Callable[[Outcome], None] | None = None, handle_sigint: bool = True) -> Outcome:
    """Run the trace against the server at opts.url and write the record to `out`."""
    import json

    from models.strict import number

    number(opts.speedup, "--speedup", 0.0, 1e6, ObserveError, lo_open=True)
    number(opts.request_timeout_s, "--timeout-s", 0.0, 86400.0, ObserveError, lo_open=True)
    if not 0.05 <= opts.scrape_interval_s <= 3600:
        raise ObserveError(f"--scrape-interval-s must be between 0.05 and 3600, got {opts.scrape_interval_s}")
    if opts.max_concurrency is not None and opts.max_concurrency < 1:
        raise ObserveError(f"--max-concurrency must be >= 1, got {opts.max_concurrency}")
    try:
        ep = http.Endpoint.parse(opts.url)
    except http.HttpError as exc:
        raise ObserveError(str(exc)) from None
    served, entry, metrics_text = await probe(ep, opts.model)
    if not metrics_text:
        say(f"{ep.base}/metrics: not available; the record will have no running/waiting/KV series")
    version = ""
    with contextlib.suppress(http.HttpError, ValueError, TimeoutError):
        version = str(json.loads(await http.get(ep, "/version", timeout=5.0)).get("version", ""))
    spec, ref = _spec_for(opts.guess, served, entry)
    max_len = entry.get("max_model_len") if isinstance(entry.get("max_model_len"), int) else None
    plan = plan_requests(trace, vocab=spec.vocab_size if spec else None, max_model_len=max_len, seed=opts.seed)
    guess = EngineGuess(**{**opts.guess.__dict__, "model": ref or opts.guess.model})
    meta = engine_meta(guess, served, max_len, prom.cache_config(metrics_text), version)
    outcome = Outcome(Path(out), planned=len(plan), clamped=sum(r.clamped for r in plan))
    writer = RecordWriter(Path(out), meta)
    if spec is not None:
        (Path(out) / "config.json").write_text(json.dumps(spec.config, indent=1), encoding="utf-8")
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    obs = Observer(ep, served, plan, opts, writer, outcome, say, progress)
    _update_meta(meta, opts, trace, outcome, started, obs)
    writer.write_meta()
    loop = asyncio.get_running_loop()
    sigint = False
    if handle_sigint:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, _interrupt, obs, outcome, say)
            sigint = True
    try:
        await obs.run()
    finally:
        if sigint:
            loop.remove_signal_handler(signal.SIGINT)
        _update_meta(meta, opts, trace, outcome, started, obs)
        writer.close()
    return outcome


def _interrupt(obs: Observer, outcome: Outcome, say: Callable[[str], None]) -> None:
    if not outcome.interrupted:
        outcome.interrupted = True
        say("interrupted: stopping; what was measured is kept")
    obs.stop.set()
    obs.abort.set()


def _update_meta(meta: dict[str, Any], opts: ObserveOptions, trace, o: Outcome, started: str, obs: Observer) -> None:
    first, last = (obs.counters[0], obs.counters[-1]) if obs.counters else ({}, {})
    meta["observed"] = {
        "by": "kvsim observe", "url": obs.ep.base, "started_utc": started, "clock": "client",
        "trace": trace.source, "trace_digest": trace.digest(), "speedup": opts.speedup,
        "max_concurrency": opts.max_concurrency, "planned": o.planned, "sent": o.sent, "completed": o.completed,
        "failed": o.failed, "failures": dict(o.failures), "not_sent": o.planned - o.sent,
        "interrupted": o.interrupted, "server_gone": o.server_gone, "clamped_to_max_model_len": o.clamped,
        "scrapes": o.scrapes, "scrape_failures": o.scrape_failures, "duration_s": round(o.duration_s, 3),
        "server_counters": {k: last[k] - first[k] for k in last if k in first},
    }
    meta["num_requests"] = o.completed
