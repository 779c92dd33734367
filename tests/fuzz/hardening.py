"""Generators for issue 29's classes of hostile input, seeded like cases.py: numbers that overflow
(every file reader), NaN/Infinity and byte-order-mark files whose messages must name the field,
paths that are not regular files (a real FIFO, devices, a socket, a folder), snapshots whose
embedded trace holds values beyond 64 bits, and crafted dashboard links. Every refusal must name
what is at fault (`Case.names`), or the harness counts it "unclear"."""

from __future__ import annotations

import json
import os
import random
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.fuzz.harness import Case

ROOT = Path(__file__).resolve().parents[2]
GPU = {"hbm_gib": 80, "hbm_bandwidth_gbs": 3350, "bf16_tflops": 989}
GPU_KEYS = ("hbm_gib", "hbm_gb", "hbm_bytes", "hbm_bandwidth_gbs", "hbm_bandwidth", "bf16_tflops", "bf16_flops",
            "fp8_tflops", "fp8_flops", "host_link_gbs", "host_link_bandwidth", "nvlink_gbs", "nvlink_bandwidth",
            "gemm_efficiency", "memory_efficiency")
CONSTANTS = ("NaN", "Infinity", "-Infinity")
PLACE = "__HOSTILE__"


def hostile_number(rng: random.Random) -> int | float:
    """A finite number no field of any reader accepts: |x| >= 2**63 (ints up to 1,000 bits)."""
    return rng.choice([
        1e300, 1.7e308, -1e300, 2**63, 2**64, -(2**63) - 1,
        10 ** rng.randint(19, 400), -(10 ** rng.randint(19, 400)), 2 ** rng.randint(64, 1000),
        float(f"{rng.uniform(1, 9):.3f}e{rng.randint(19, 307)}"),
    ])


def _json_with(doc: Any, path: list[Any], value: Any) -> str:
    """`doc` as JSON text with the leaf at `path` replaced by `value` (a number, or NaN/Infinity text)."""
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = PLACE
    return json.dumps(doc).replace(json.dumps(PLACE), value if isinstance(value, str) else json.dumps(value))


def _numeric_paths(node: Any, path: list[Any]) -> Iterator[list[Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _numeric_paths(value, [*path, key])
    elif isinstance(node, list):
        for i, value in enumerate(node[:3]):
            yield from _numeric_paths(value, [*path, i])
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield path


def _dotted(path: list[Any]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else (f".{k}" if i else str(k)) for i, k in enumerate(path))


def _file(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


# ----- numbers that overflow and NaN/Infinity, in every file reader -----------------------------
def gpu_cases(rng: random.Random, tmp: Path, count: int) -> Iterator[Case]:
    from models.gpus import GpuError, load_gpu_file

    for i in range(count):
        key = rng.choice(GPU_KEYS)
        value = rng.choice(CONSTANTS) if rng.random() < 0.25 else hostile_number(rng)
        path = _file(tmp, f"gpu{i}.json", _json_with({**GPU, key: 1}, [key], value))
        yield Case("gpu file", f"{key}={str(value)[:30]}", lambda p=path: load_gpu_file(p), "reject",
                   errors=(GpuError,), names=f"gpu{i}.json: {key}")


def config_cases(rng: random.Random, tmp: Path, count: int) -> Iterator[Case]:
    from models.spec import SpecError, load_spec

    catalog = sorted((ROOT / "models" / "catalog").glob("*.json"))
    for i in range(count):
        cfg = json.loads(rng.choice(catalog).read_text())
        path_in_doc = rng.choice(list(_numeric_paths(cfg, [])))
        value = rng.choice(CONSTANTS) if rng.random() < 0.25 else hostile_number(rng)
        path = _file(tmp, f"cfg{i}.json", _json_with(cfg, path_in_doc, value))
        yield Case("model config file", f"{_dotted(path_in_doc)}={str(value)[:30]}", lambda p=path: load_spec(str(p)),
                   "reject", errors=(SpecError,), names=f"cfg{i}.json: {_dotted(path_in_doc)}")


def profile_cases(rng: random.Random, tmp: Path, count: int) -> Iterator[Case]:
    from sim.timing.profile import COEFFICIENTS, ProfileError, load_profile

    good = {"schema": "kvsim.cost_profile", "schema_version": 1, "tp": 1, "model": "llama-3-8b",
            "coefficients": {name: 1e-4 for name in COEFFICIENTS}, "fit": {"samples": 40, "r2": 0.99}}
    paths = [["coefficients", name] for name in COEFFICIENTS] + [["tp"], ["fit", "samples"], ["fit", "r2"]]
    for i in range(count):
        where = rng.choice(paths)
        value = rng.choice(CONSTANTS) if rng.random() < 0.3 else hostile_number(rng)
        path = _file(tmp, f"prof{i}.json", _json_with(good, where, value))
        yield Case("profile file", f"{_dotted(where)}={str(value)[:30]}", lambda p=path: load_profile(p), "reject",
                   errors=(ProfileError,), names=f"prof{i}.json: {_dotted(where)}")


def _snapshot_doc() -> dict[str, Any]:
    from sim.report.snapshot import Snapshot
    from sim.trace import Trace
    from tests.test_charts import make_result

    trace = Trace.build([0.0, 0.5, 1.0], [600, 700, 1100], [3, 4, 5], format="mooncake", source="inner.jsonl",
                        prefix_hashes=[[1, 2], [1, 3], [1, 2, 9]], prefix_block_size=512)
    result = make_result()
    result.trace_digest = trace.digest()
    return json.loads(Snapshot.from_result(result, trace).to_json())


def snapshot_trace_cases(rng: random.Random, tmp: Path, count: int) -> Iterator[Case]:
    """Hostile values inside a snapshot's embedded trace, uploaded (the page's call) and imported by
    the CLI: refused naming the outer file first, then the column (and row)."""
    from sim.__main__ import main as sim_main
    from sim.report.snapshot import Snapshot, SnapshotError

    doc = _snapshot_doc()
    spots = [["arrival_s", 1], ["input_tokens", 2], ["output_tokens", 0], ["prefix_hashes", 1, 0],
             ["prefix_hashes", 2, 2], ["prefix_block_size"]]
    for i in range(count):
        spot = rng.choice(spots)
        value = rng.choice(CONSTANTS) if rng.random() < 0.2 else hostile_number(rng)
        text = _json_with(doc, ["trace", *spot], value)
        column = spot[0]
        if rng.random() < 0.7:
            yield Case("snapshot upload", f"trace.{_dotted(spot)}={str(value)[:30]}",
                       lambda t=text: Snapshot.from_json(t, "s.kvsim.json"), "reject", errors=(SnapshotError,),
                       names=f"s.kvsim.json: trace.{column}")
        else:
            path = _file(tmp, f"snap{i}.kvsim.json", text)
            argv = ["snapshots", "--db", str(tmp / "fuzz-store.sqlite"), "import", str(path)]
            yield Case("cli sim snapshots", f"import trace.{_dotted(spot)}={str(value)[:30]}",
                       lambda a=argv: sim_main(a), "reject", names=f"snap{i}.kvsim.json: trace.{column}")


def trace_line_cases(rng: random.Random, count: int) -> Iterator[Case]:
    """NaN/Infinity anywhere in a Mooncake line: the message names the line and the key."""
    from sim.guard.limits import MAX_UPLOAD_ROWS
    from sim.trace import TraceError, load_trace_bytes

    keys = ("timestamp", "input_length", "output_length")
    for i in range(count):
        lines = [{"timestamp": 100 * n, "input_length": 600, "output_length": 4, "hash_ids": [n, n + 1]}
                 for n in range(rng.randint(1, 6))]
        row = rng.randrange(len(lines))
        key = rng.choice(keys)
        data = "".join((_json_with(line, [key], rng.choice(CONSTANTS)) if n == row else json.dumps(line)) + "\n"
                       for n, line in enumerate(lines)).encode()
        yield Case("trace upload", f"NaN/Infinity #{i} in line {row + 1} {key}",
                   lambda b=data: load_trace_bytes(b, "m.jsonl", max_rows=MAX_UPLOAD_ROWS), "reject",
                   errors=(TraceError,), names=f"m.jsonl: line {row + 1}: {key}")
    for blank in ("", " ", "\n", "\r\n", "\n\n \t", "\r"):
        for name in ("t.csv", "t.jsonl"):
            data = b"\xef\xbb\xbf" + blank.encode()
            yield Case("trace upload", f"byte-order mark + {blank!r} ({name})",
                       lambda d=data, n=name: load_trace_bytes(d, n, max_rows=MAX_UPLOAD_ROWS), "reject",
                       errors=(TraceError,), names=f"{name}: empty file")


# ----- paths that are not regular files ------------------------------------------------------------
def special_path_cases(tmp: Path) -> Iterator[Case]:
    """A real FIFO (no writer: open() would block forever), devices that never end, a socket and a
    folder, given to every reader of a user-named file: refused at once, saying what the path is."""
    from models.gpus import GpuError, load_gpu_file
    from models.spec import SpecError, load_spec
    from sim.__main__ import main as sim_main
    from sim.timing.profile import ProfileError, load_profile
    from sim.trace import TraceError, load_trace

    fifo = tmp / "pipe.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    sock_path = tmp / "sock.json"
    sock = socket.socket(socket.AF_UNIX)
    if not sock_path.exists():
        sock.bind(str(sock_path))
    folder = tmp / "folder.json"
    folder.mkdir(exist_ok=True)
    paths = {fifo: "a named pipe (FIFO)", Path("/dev/zero"): "a character device",
             Path("/dev/urandom"): "a character device", sock_path: "a socket", folder: "a folder"}
    readers: dict[str, tuple[Callable[[Path], Any], tuple[type[BaseException], ...]]] = {
        "trace file": (load_trace, (TraceError,)), "gpu file": (load_gpu_file, (GpuError,)),
        "model config file": (lambda p: load_spec(str(p)), (SpecError,)), "profile file": (load_profile, (ProfileError,)),
    }
    for path, what in paths.items():
        for entry, (read, errors) in readers.items():
            says = "directory has no config.json" if entry == "model config file" and what == "a folder" else f"is {what}"
            yield Case(entry, f"{what}: {path.name}", lambda r=read, p=path: r(p), "reject", errors=errors,
                       names=f"{path.name}: {says}")
        argv = ["snapshots", "--db", str(tmp / "fuzz-store.sqlite"), "import", str(path)]
        yield Case("cli sim snapshots", f"import {what}", lambda a=argv: sim_main(a), "reject", names=f"is {what}")
    sock.close()


# ----- crafted dashboard links ----------------------------------------------------------------------
LINK_VALUES = {
    "trace_synth": lambda r: f"n={r.choice([2_000_000, 1_999_999, 500_000, 60_000_000, 10**30])},rate={r.choice([1, 50, 1e9])}",
    "replicas": lambda r: r.choice(["64", "65", "1e9", "nan", "-1"]),
    "load": lambda r: r.choice(["1000", "1e300", "inf", "0"]),
    "max_len": lambda r: r.choice(["2097152", "99999999999999999999", "abc"]),
    "gpu": lambda r: r.choice(["h100-sxm", "b900", "../../etc/passwd"]),
    "tp": lambda r: r.choice(["1", "3", "1e3"]),
    "paging": lambda r: r.choice(["paged", "magic"]),
    "trace_first": lambda r: r.choice(["0", "10000001", "-5"]),
}


def link_cases(rng: random.Random, count: int) -> Iterator[Case]:
    """Random crafted links to the Simulate page: the page answers within the case's time limit, with
    no exception, and either runs something small, names a value it would not use, or asks before a
    large run. The budget ("request-steps") shows whenever the link asks for 500,000 requests or more."""
    for i in range(count):
        params = {"trace_src": "synthetic",
                  **{k: LINK_VALUES[k](rng) for k in rng.sample(sorted(LINK_VALUES), rng.randint(2, 5))}}
        yield Case("dashboard link", f"#{i} " + "&".join(f"{k}={v}" for k, v in params.items())[:70],
                   lambda p=params: _open_simulate(p), "accept", check=lambda at, p=params: _link_answered(at, p))


def _open_simulate(params: dict[str, str]) -> Any:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app_pages" / "simulate.py"), default_timeout=60)
    at.query_params.update(params)
    return at.run()


def _link_answered(at: Any, params: dict[str, str]) -> bool:
    """No exception; something said or shown; and a link for 500,000 requests or more never ran
    without a click (no result: the budget's question, or the dashboard's cap, or an input error)."""
    if at.exception:
        return False
    said = [w.value for w in at.warning] + [e.value for e in at.error]
    n = int(float(params["trace_synth"].split(",")[0][2:])) if "trace_synth" in params else 0
    if n >= 500_000 and (at.metric or not any("request-steps" in m or "limit" in m or "range" in m for m in said)):
        return False
    return bool(at.metric) or bool(said)


def hardening_cases(seed: int, tmp: Path, scale: int = 1) -> Iterator[Case]:
    rng = random.Random(seed * 29)
    tmp.mkdir(parents=True, exist_ok=True)
    yield from gpu_cases(rng, tmp, 24 * scale)
    yield from config_cases(rng, tmp, 24 * scale)
    yield from profile_cases(rng, tmp, 16 * scale)
    yield from snapshot_trace_cases(rng, tmp, 20 * scale)
    yield from trace_line_cases(rng, 16 * scale)
    yield from special_path_cases(tmp)
    yield from link_cases(rng, 6 * scale)
