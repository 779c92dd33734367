"""Generators of hostile input, one per class in issue 13, for every entry point. Seeded: the same
seed gives the same cases. Each yields harness.Case objects; `all_cases(seed, scale)` is the suite."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.fuzz.harness import Case

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
GEN = "arrival_s,input_tokens,output_tokens\n"
NUMBERS = ["0", "-1", "1e18", "nan", "inf", "-inf", "1e-300", "abc", "", "99999999999999999999999", "2.5", "true", "5"]


def _upload(data: bytes, name: str):
    from sim.guard.limits import MAX_UPLOAD_ROWS
    from sim.trace import load_trace_bytes

    return lambda: load_trace_bytes(data, name, max_rows=MAX_UPLOAD_ROWS)


def _rows(t) -> list[list[int]]:
    return [t.df["input_tokens"].tolist(), t.df["output_tokens"].tolist()]


# ----- traces ---------------------------------------------------------------------------------
def trace_cases(rng: random.Random, mutations: int) -> Iterator[Case]:
    from sim.trace import TraceError

    def jl(**kw: Any) -> bytes:
        return (json.dumps({"arrival_s": 0, "input_tokens": 5, "output_tokens": 3, **kw}) + "\n").encode()

    def mc(hashes: str) -> bytes:
        return ('{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": ' + hashes + "}\n").encode()

    reject = {
        "deep JSON": b'{"arrival_s": 0, "input_tokens": ' + b"[" * 50_000 + b"]" * 50_000 + b', "output_tokens": 3}\n',
        "deep JSON array": b"[" * 50_000 + b"]" * 50_000,
        "NaN arrival": b'{"arrival_s": NaN, "input_tokens": 5, "output_tokens": 3}\n',
        "Infinity tokens": b'{"arrival_s": 0, "input_tokens": Infinity, "output_tokens": 3}\n',
        "huge float tokens": jl(input_tokens=1e300),
        "huge int tokens": jl(input_tokens=10**30),
        "5000-digit int": b'{"arrival_s": 0, "input_tokens": ' + b"9" * 5000 + b', "output_tokens": 3}\n',
        "fractional tokens": jl(input_tokens=2.5),
        "bool tokens": jl(input_tokens=True),
        "bool arrival": jl(arrival_s=False),
        "string tokens": jl(output_tokens="many"),
        "huge arrival": jl(arrival_s=1e300),
        "hash beyond 64 bits": mc("[123456789012345678901234567890]"),
        "hash below -2^63": mc(f"[{-(2**63) - 1}]"),
        "hash as float": mc("[1.5]"),
        "hash as bool": mc("[true]"),
        "hashes not a list": mc('"abc"'),
        "duplicate CSV header": b"arrival_s,input_tokens,input_tokens,output_tokens\n0,5,6,3\n",
        "duplicate header other case": b"arrival_s,input_tokens,Input_Tokens,output_tokens\n0,5,6,3\n",
        "bool CSV cell": (GEN + "0,true,3\n").encode(),
        "negative tokens": (GEN + "0,-5,3\n").encode(),
        "zero tokens": (GEN + "0,0,3\n").encode(),
        "empty": b"",
        "whitespace only": b" \n\n\t\n",
        "header only": GEN.encode(),
        "gzip magic": b"\x1f\x8b\x08\x00" + bytes(40),
        "zip magic": b"PK\x03\x04" + bytes(40),
        "NUL byte": (GEN + "0,5\x003\n").encode(),
        "latin-1": (GEN + "0,5,3\n").encode() + b"caf\xe9\n",
        "ragged row": (GEN + "0,5,3,9,9\n").encode(),
        "unknown columns": b"a,b,c\n1,2,3\n",
        "JSON scalar lines": b"1\n2\n",
        "JSON array of numbers": b"[1, 2, 3]",
        "missing column": b"arrival_s,input_tokens\n0,5\n",
        "empty cell": (GEN + "0,,3\n").encode(),
        "datetime garbage": b"TIMESTAMP,ContextTokens,GeneratedTokens\nnot-a-date,5,3\n",
    }
    yield Case("trace upload", "million-char line", _upload(
        b'{"arrival_s": 0, "input_tokens": 5, "output_tokens": 3, "x": "' + b"a" * 1_000_000 + b'"}\n', "t.jsonl"),
        errors=(TraceError,))  # any outcome but a hang or traceback: the extra key is ignored
    for label, data in reject.items():
        yield Case("trace upload", label, _upload(data, "t.jsonl" if data[:1] in b"{[" else "t.csv"), "reject",
                   errors=(TraceError,))
    accept = {  # must parse, and to the right numbers
        "CR-only lines": (GEN.replace("\n", "\r") + "0,5,3\r1,6,4\r").encode(),
        "CRLF lines": (GEN.replace("\n", "\r\n") + "0,5,3\r\n1,6,4\r\n").encode(),
        "UTF-8 BOM": b"\xef\xbb\xbf" + (GEN + "0,5,3\n1,6,4\n").encode(),
        "CR-only JSONL": jl(input_tokens=5, output_tokens=3).replace(b"\n", b"\r") + jl(arrival_s=1, input_tokens=6,
                                                                                         output_tokens=4).replace(b"\n", b"\r"),
        "blank lines JSONL": b"\n" + jl() .replace(b'"input_tokens": 5, "output_tokens": 3', b'"input_tokens": 5, "output_tokens": 3')
        + b"\n\n" + jl(arrival_s=1, input_tokens=6, output_tokens=4),
        "whole-number floats": jl(input_tokens=5.0, output_tokens=3.0) + jl(arrival_s=1, input_tokens=6.0, output_tokens=4.0),
    }
    for label, data in accept.items():
        yield Case("trace upload", label, _upload(data, "t.jsonl" if b"{" in data[:5] else "t.csv"), "accept",
                   check=lambda t: _rows(t) == [[5, 6], [3, 4]], errors=(TraceError,))
    yield from _mutations(rng, mutations)


def _mutations(rng: random.Random, count: int) -> Iterator[Case]:
    """Random damage to the bundled samples: any outcome but a traceback, hang or crash."""
    from sim.trace import TraceError

    samples = sorted(p for p in SAMPLES.iterdir() if p.suffix in (".csv", ".jsonl"))
    for i in range(count):
        src = rng.choice(samples)
        data = bytearray(src.read_bytes()[:20_000])
        how = rng.choice(("flip", "truncate", "junk line", "swap delimiter", "duplicate header", "drop bytes"))
        if how == "flip":
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif how == "truncate":
            data = data[: rng.randrange(len(data))]
        elif how == "junk line":
            at = data.find(b"\n", rng.randrange(len(data)))
            junk = rng.choice([b"{{{", b",,,,", b'{"a": [[[[', b"\x00\x01", b"1e999,1e999,1e999", b"-0,-0,-0",
                               b'{"input_tokens": true}', rng.choice(NUMBERS).encode()])
            data[at + 1 : at + 1] = junk + b"\n"
        elif how == "swap delimiter":
            data = data.replace(b",", rng.choice([b";", b"\t", b'","', b",,"]))
        elif how == "duplicate header":
            first = bytes(data[: data.find(b"\n") + 1])
            data = bytearray(first.rstrip(b"\r\n") + b"," + first.split(b",")[0].strip() + b"\n") + data[len(first):]
        else:
            start = rng.randrange(len(data))
            del data[start : start + rng.randint(1, 200)]
        yield Case("trace upload", f"mutated {src.name} ({how}) #{i}", _upload(bytes(data), src.name),
                   errors=(TraceError,))


def file_cases(tmp: Path) -> Iterator[Case]:
    from sim.trace import TraceError, load_trace

    (tmp / "plain.txt").write_text("x")
    for label, path in (("a folder", tmp), ("missing parent", tmp / "no" / "such" / "t.csv"),
                        ("name too long", tmp / ("x" * 400 + ".csv")), ("under a file", tmp / "plain.txt" / "t.csv"),
                        ("a device", Path("/dev/null")), ("proc file", Path("/proc/self/status"))):
        yield Case("trace file", label, lambda p=path: load_trace(p), "reject", errors=(TraceError,))


# ----- synthetic specs (CLI --synthetic and the dashboard's URL parameter) ---------------------
def synthetic_cases(rng: random.Random, count: int) -> Iterator[Case]:
    from sim.trace import TraceError
    from ui.trace_picker import synthetic_for_dashboard

    fixed = {"n=50000000,rate=5": "reject", "n=1e18": "reject", "n=10,seed=-1": "reject", "n=10,rate=1e-300": "reject",
             "n=10,input=uniform:lo=1:hi=1e18": "reject", "n=10,max_len=1e30": "reject", "n=10,rate=nan": "reject",
             "n=10,input=lognormal:mean=1e9:sigma=10": "either", "n=10,cv=0": "reject", "n=10,n=11": "reject",
             "n=10,input=fixed:value=1e18": "reject", "n=10,output=zipf:a=1e9:hi=10": "reject",
             "n=10,input=lognormal:mean=1000000:sigma=10": "either", "n=10,rate=5,seed=4294967295": "accept"}
    for spec, expect in fixed.items():
        yield Case("synthetic (URL)", spec, lambda s=spec: synthetic_for_dashboard(s), expect, errors=(TraceError,))
    keys = ["n", "rate", "arrival", "cv", "input", "output", "max_len", "seed", "preset", "bogus"]
    values = NUMBERS + ["gamma", "poisson", "uniform:lo=5:hi=1", "zipf:a=0", "lognormal:mean=-5", "resample",
                        "fixed:value=0", "sharegpt-like", "fixed:value=1e9", "uniform:lo=1:hi=1000000000"]
    for i in range(count):
        parts = [f"{k}={rng.choice(values)}" for k in rng.sample(keys, rng.randint(1, 4))]
        spec = ",".join(["n=" + rng.choice(["3", "100", "2000"])] + parts) if rng.random() < 0.7 else ",".join(parts)
        yield Case("synthetic (URL)", f"random #{i}: {spec}", lambda s=spec: synthetic_for_dashboard(s),
                   errors=(TraceError,))


# ----- model configs ---------------------------------------------------------------------------
CONFIG = json.loads((ROOT / "models" / "catalog" / "llama-3-8b.json").read_text())
COUNTS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
          "intermediate_size", "max_position_embeddings", "head_dim")
FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias")


def config_cases() -> Iterator[Case]:
    from models.spec import SpecError, spec_from_config
    from sim.guard.uploads import store_config

    for key in COUNTS:
        for bad in (0, -1, 10**12, 1e300, True, 2.5, "32", [], {}, "nan"):
            cfg = {**CONFIG, key: bad}
            yield Case("model config", f"{key}={bad!r}", lambda c=cfg: spec_from_config(c, source="config.json"), "reject",
                       errors=(SpecError,))
    for key in FLAGS:
        yield Case("model config", f"{key}='false'", lambda k=key: spec_from_config({**CONFIG, k: "false"}), "accept",
                   check=lambda s, k=key: {"tie_word_embeddings": s.tie_word_embeddings, "attention_bias": s.layout.o_bias,
                                           "mlp_bias": s.layout.mlp_bias}[k] is False)
        for bad in ("maybe", 7, [], {}):
            yield Case("model config", f"{key}={bad!r}", lambda k=key, b=bad: spec_from_config({**CONFIG, k: b}), "reject",
                       errors=(SpecError,))
    raw = {
        "deep": b'{"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        "NaN": json.dumps({**CONFIG, "rope_theta": 1.0}).replace("1.0", "NaN").encode(),
        "not an object": b"[1, 2]",
        "not JSON": b"hidden_size: 4096",
        "over 1 MiB": b"{" + b" " * (1 << 20) + b"}",
        "latin-1": json.dumps(CONFIG).encode().replace(b"llama", b"ll\xe9ma"),
        "empty": b"",
    }
    for label, data in raw.items():
        yield Case("model config upload", label, lambda d=data: store_config(d, "config.json"), "reject",
                   errors=(SpecError,))


# ----- scenarios (CLI flags, URL widgets, snapshot files all end here) --------------------------
def scenario_cases() -> Iterator[Case]:
    from sim.scenario import Scenario, ScenarioError

    ints = ("tp", "replicas", "block_size", "max_num_seqs", "max_batched_tokens", "kv_heads", "max_model_len",
            "static_batch", "seed")
    for field in ints:
        for bad in (0 if field != "seed" else -1, -5, 10**12, True, 2.5, "3", float("nan"), [1]):
            yield Case("scenario", f"{field}={bad!r}", lambda f=field, b=bad: Scenario.from_dict({f: b}), "reject",
                       errors=(ScenarioError,))
    for field in ("gpu_mem_util", "kv_budget_gib", "swap_space_gib"):
        for bad in (float("nan"), float("inf"), -1.0, 1e300, "0.5", True):
            yield Case("scenario", f"{field}={bad!r}", lambda f=field, b=bad: Scenario.from_dict({f: b}), "reject",
                       errors=(ScenarioError,))
    for field in ("prefix_caching", "chunked_prefill"):
        yield Case("scenario", f"{field}='false'", lambda f=field: Scenario.from_dict({f: "false"}), "accept",
                   check=lambda s, f=field: getattr(s, f) is False)
        for bad in ("maybe", 2, None):
            yield Case("scenario", f"{field}={bad!r}", lambda f=field, b=bad: Scenario.from_dict({f: b}), "reject",
                       errors=(ScenarioError,))
    for bad in ([], "x", 1, None, {"bogus": 1}, {"allocator": "magic"}, {"model": ""}, {"gpu": 5}):
        yield Case("scenario", f"document {bad!r}", lambda b=bad: Scenario.from_dict(b), "reject", errors=(ScenarioError,))


# ----- snapshots (uploaded files and store bodies), drawn like the page draws them ------------
def _draw(snap: Any) -> Any:
    from sim.report import charts
    from sim.report.html_report import headline_metrics, kv_pool_line, weights_bytes
    from sim.report.served import load_verdict, not_served, rejection_fix

    headline_metrics(snap.summary), kv_pool_line(snap.summary), weights_bytes(snap)
    load_verdict(snap.summary), not_served(snap.summary), rejection_fix(snap.summary)
    for figure in (charts.memory_timeline(snap.steps, weights_bytes(snap)), charts.queue_and_batch(snap.steps),
                   charts.kv_usage(snap.steps), charts.latency_cdfs(snap.requests), charts.preemptions(snap.steps)):
        figure.to_json()
    return snap


def snapshot_cases(rng: random.Random, count: int) -> Iterator[Case]:
    from sim.report.snapshot import Snapshot, SnapshotError
    from tests.test_charts import make_result

    good = json.loads(Snapshot.from_result(make_result(), None).to_json())

    def case(label: str, doc: Any, expect: str = "either") -> Case:
        text = doc if isinstance(doc, str | bytes) else json.dumps(doc)
        return Case("snapshot upload", label, lambda t=text: _draw(Snapshot.from_json(t, "s.kvsim.json")), expect,
                    errors=(SnapshotError,))

    yield case("the good one", good, "accept")
    for key in list(good):
        yield case(f"without {key}", {k: v for k, v in good.items() if k != key})
    bads = [None, "x", 1e300, 10**30, True, [], {}, -1]
    for key in ("requests", "completed", "throughput_tok_s", "num_blocks", "bytes_per_token", "kv_capacity_bytes"):
        for bad in bads:
            yield case(f"summary.{key}={bad!r}"[:60], {**good, "summary": {**good["summary"], key: bad}})
    for key in ("ttft_s", "tpot_s", "kv_cache_usage_perc"):
        for bad in ("x", 5, {"p50": "x"}, {"p99": 1e300}, [1]):
            yield case(f"summary.{key}={bad!r}", {**good, "summary": {**good["summary"], key: bad}})
    for frame in ("steps", "requests"):
        cols = good[frame]["columns"]
        for label, value in (("drop a column", {"columns": cols[1:], "data": [r[1:] for r in good[frame]["data"]]}),
                             ("huge number", {"columns": cols, "data": [[1e300] * len(cols)]}),
                             ("string cell", {"columns": cols, "data": [["x"] * len(cols)]}),
                             ("ragged", {"columns": cols, "data": [[1]]}),
                             ("no rows", {"columns": cols, "data": []}),
                             ("columns not strings", {"columns": [1] * len(cols), "data": []})):
            yield case(f"{frame}: {label}", {**good, frame: value})
    yield case("deep", '{"schema": ' + "[" * 50_000 + "]" * 50_000 + "}", "reject")
    yield case("NaN", json.dumps(good).replace('"requests": 8', '"requests": NaN', 1) if '"requests": 8' in json.dumps(good)
               else json.dumps(good)[:-1] + ', "x": NaN}', "reject")
    yield case("name is Markdown", {**good, "name": "[x](http://e.example) **b** <script>"}, "accept")
    yield case("scenario with replicas 1e12", {**good, "scenario": {**good["scenario"], "replicas": 10**12}}, "reject")
    for i in range(count):  # random leaf damage anywhere in the document
        doc = json.loads(json.dumps(good))
        node, path = doc, []
        for _ in range(rng.randint(1, 4)):
            if isinstance(node, dict) and node:
                key = rng.choice(list(node))
            elif isinstance(node, list) and node:
                key = rng.randrange(len(node))
            else:
                break
            path.append(key)
            if not isinstance(node[key], dict | list) or rng.random() < 0.3:
                node[key] = rng.choice(bads + ["", "x" * 5000, [[[]]], {"a": {}}])
                break
            node = node[key]
        yield case(f"random #{i} at {path}"[:80], doc)


# ----- command lines ----------------------------------------------------------------------------
def cli_cases(rng: random.Random, tmp: Path) -> Iterator[Case]:
    from gpu_backend.cli import main as gpu_main
    from sim.__main__ import main as sim_main

    base = ["run", "--synthetic", "n=5,rate=5", "--model", "llama-3-8b", "--no-progress", "--json"]
    flags = ["--tp", "--replicas", "--block-size", "--max-num-seqs", "--max-batched-tokens", "--max-model-len",
             "--kv-heads", "--static-batch", "--seed", "--gpu-mem-util", "--kv-budget-gib", "--swap-space-gib"]
    for flag in flags:
        for value in ("-1", "0", "1e18", "nan", "abc", "99999999999999999999", "inf"):
            if flag in ("--seed", "--swap-space-gib") and value == "0":  # valid: seed 0, no swap space
                continue
            yield Case("cli sim run", f"{flag} {value}", lambda f=flag, v=value: sim_main([*base, f, v]), "reject")
    for argv in (["run", "--bogus"], ["nope"], [], ["run"], ["kv"], ["capacity", "--model", "llama-3-8b"],
                 ["capacity", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--contexts", "1e99"],
                 ["capacity", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--users", "99999999999999"],
                 ["trace", str(tmp)], ["trace", str(tmp / ("y" * 400))], ["trace", "synthetic:n=1e18"],
                 ["trace", str(SAMPLES / "chat_small.csv"), "--clamp", "0"],
                 ["trace", str(SAMPLES / "chat_small.csv"), "--out", "/dev/full"],
                 ["trace", str(SAMPLES / "chat_small.csv"), "--out", str(tmp)],
                 ["trace", str(SAMPLES / "chat_small.csv"), "--out", str(tmp / "no" / "such" / "x.csv")],
                 [*base, "--out", str(SAMPLES / "chat_small.csv")],
                 [*base, "--html", str(tmp)], [*base, "--html", "/dev/full"],
                 [*base[:2], "synthetic:n=5", "--format", "azure", *base[3:]],
                 ["run", "--trace", str(tmp), "--model", "llama-3-8b"],
                 ["run", "--synthetic", "n=5", "--model", str(tmp)],
                 ["run", "--synthetic", "n=5", "--model", "llama-3-8b", "--gpu", str(tmp / "gpu.json")],
                 ["run", "--synthetic", "n=5", "--model", "llama-3-8b", "--profile", str(tmp)],
                 ["snapshots", "--db", str(tmp), "list"], ["snapshots", "--db", str(tmp / "s.sqlite"), "export", "nope"],
                 ["snapshots", "--db", str(tmp / "s.sqlite"), "import", str(tmp)]):
        yield Case("cli sim", " ".join(argv)[:80], lambda a=argv: sim_main(a), "reject")
    gbase = ["run", "--synthetic", "n=2", "--model", "tiny-llama", "--device", "cpu"]
    for argv in ([*gbase, "--max-steps", "-1"], [*gbase, "--max-steps", "0"], [*gbase, "--replicas", "1000000000"],
                 ["profile", "--model", "tiny-llama", "--block-size", "0", "--out", "x.json"],
                 ["profile", "--model", "tiny-llama", "--repeats", "-3", "--out", "x.json"],
                 ["run", "--bogus"], ["bogus"], [*gbase, "--device", "tpu"]):
        yield Case("cli gpu_backend", " ".join(argv)[:80], lambda a=argv: gpu_main(a), "reject")


def all_cases(seed: int, tmp: Path, scale: int = 1) -> Iterator[Case]:
    from tests.fuzz.hardening import hardening_cases

    yield from hardening_cases(seed, tmp / "issue29", scale)  # issue 29's classes first: never cut by the budget
    rng = random.Random(seed)
    yield from trace_cases(rng, 60 * scale)
    yield from file_cases(tmp)
    yield from synthetic_cases(rng, 40 * scale)
    yield from config_cases()
    yield from scenario_cases()
    yield from snapshot_cases(rng, 40 * scale)
    yield from cli_cases(rng, tmp)
