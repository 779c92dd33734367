"""Where a search's configurations run: inline, on a local process pool, or as Ray tasks.

All three run the same function (`search_config`) and hand rows back as they finish. The workload
(a trace can be millions of rows) travels once per worker, never once per probe or per task:
the pool's initializer receives it once per process; Ray gets it once into the object store
(`ray.put`) and each worker process fetches and keeps it the first time a task needs it.

Ray: `ray="auto"` joins a running cluster (RAY_ADDRESS, or one started with `ray start` on this
machine) and otherwise starts a local instance; any other value is a cluster address
(`ray://head:10001` or `head:6379`). If Ray is already initialised (tests, notebooks) it is used
as is. The code travels with the tasks (runtime_env py_modules: sim and models), so cluster
nodes need only the requirements installed, not a checkout. docs/PLAN.md says what scales.

After the sweep, the best row's rate interval (sim.plan.rate_interval) has two ends that share
nothing: the pool runs them side by side, one per worker, before it closes (`ends`); inline and Ray
leave them to the caller, which runs them one after the other in its own process.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from sim.plan.config_search import SearchOptions, next_start, probe, search_chain, search_config
from sim.plan.rate_interval import EndJob, Ends, ScaledEdge, run_end
from sim.plan.workload import Workload
from sim.scenario import Scenario


class Executor(Protocol):
    def run(self, configs: list[Scenario]) -> Iterator[tuple[int, dict[str, Any]]]:
        """(index in configs, row) as each configuration finishes, in any order."""
        ...

    def cancel(self) -> None:
        """Stop: unfinished configurations are dropped."""
        ...

    def ends(self) -> Ends | None:
        """What runs a rate interval's two ends side by side on this executor's workers (None: the
        caller runs them one after the other, sim.plan.rate_interval)."""
        ...

    def __enter__(self) -> Executor: ...

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


def make_executor(workload: Workload, options: SearchOptions, *, workers: int = 1, ray: str | None = None) -> Executor:
    if ray:
        return RayExecutor(workload, options, ray, workers)
    if workers > 1:
        return PoolExecutor(workload, options, workers)
    return InlineExecutor(workload, options)


class _Base:
    def __enter__(self) -> Any:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.close()

    def close(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def ends(self) -> Ends | None:
        return None


class InlineExecutor(_Base):
    """In this process, one configuration after another (the dashboard's default)."""

    def __init__(self, workload: Workload, options: SearchOptions) -> None:
        self.workload, self.options = workload, options

    def run(self, configs: list[Scenario]) -> Iterator[tuple[int, dict[str, Any]]]:
        for chain in groups(configs) if self.options.reuse else [[job] for job in enumerate(configs)]:
            rows: list[dict[str, Any]] = []
            for i, scenario in chain:
                rows.append(search_config(self.workload, scenario, self.options, next_start(rows, self.options)))
                yield i, rows[-1]


# ----- local process pool ---------------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _pool_init(workload: Workload, options: SearchOptions) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _WORKER["workload"], _WORKER["options"] = workload, options


def _pool_task(job: tuple[int, Scenario]) -> tuple[int, dict[str, Any]]:
    index, scenario = job
    return index, search_config(_WORKER["workload"], scenario, _WORKER["options"])


def _pool_chain(job: list[tuple[int, Scenario]]) -> list[tuple[int, dict[str, Any]]]:
    rows = search_chain(_WORKER["workload"], [scenario for _, scenario in job], _WORKER["options"])
    return [(index, row) for (index, _), row in zip(job, rows, strict=True)]


def _pool_end(job: EndJob) -> ScaledEdge:
    return run_end(_WORKER["workload"], _WORKER["options"], job, probe)


def chains(configs: list[Scenario]) -> list[list[tuple[int, Scenario]]]:
    """The grid cut into runs of neighbours that differ in one field only, the same field all along
    (grid order varies the last field fastest: one run per value of the other fields). Fixed by the
    grid alone, so which answer seeds which search never depends on the executor or on timing."""
    out: list[list[tuple[int, Scenario]]] = []
    varying: set[str] = set()
    for index, scenario in enumerate(configs):
        if out:
            diff = _differing(out[-1][-1][1], scenario)
            if len(diff) == 1 and (not varying or diff == varying):
                out[-1].append((index, scenario))
                varying = diff
                continue
        out.append([(index, scenario)])
        varying = set()
    return out


MIN_TASKS = 2  # groups(): chains are paired only while this many tasks remain (both cores of a small machine busy)


# Fields whose change multiplies a configuration's capacity (TP4 -> TP8: x1.75 measured on the Azure
# conversation trace): a neighbour's answer there is no nearer than the workload's start, and a far
# first probe that passes is the dearest kind (low load, many steps), so such chains are not paired.
FAR_FIELDS = frozenset({"model", "tp", "replicas", "pd", "prefill_tp", "decode_tp", "weight_dtype", "speedup"})


def groups(configs: list[Scenario]) -> list[list[tuple[int, Scenario]]]:
    """The tasks of a search with reuse: chains (above), each paired with the first later chain that
    is its sibling (member by member they differ in one field, the same one, not one of FAR_FIELDS),
    the second walked backwards so every configuration still follows a neighbour differing in one
    field (a snake: h100 bf16, h100 fp8, h200 fp8, h200 bf16). A pair's second chain then starts near
    the first one's answer rather than at the workload's start. Pairs are formed only from at least
    2 x MIN_TASKS chains, so a grid keeps MIN_TASKS tasks to run side by side; like chains, the cut
    depends on the grid alone (whatever order its fields were given in)."""
    cut = chains(configs)
    if len(cut) < 2 * MIN_TASKS:
        return cut
    out: list[list[tuple[int, Scenario]]] = []
    taken: set[int] = set()
    for i, chain in enumerate(cut):
        if i in taken:
            continue
        mate = next((j for j in range(i + 1, len(cut)) if j not in taken and _siblings(chain, cut[j])), None)
        if mate is None:
            out.append(chain)
        else:
            taken.add(mate)
            out.append(chain + cut[mate][::-1])
    return out


def _siblings(a: list[tuple[int, Scenario]], b: list[tuple[int, Scenario]]) -> bool:
    if len(a) != len(b):
        return False
    diffs = [_differing(x, y) for (_, x), (_, y) in zip(a, b, strict=True)]
    return len(diffs[0]) == 1 and not diffs[0] & FAR_FIELDS and all(d == diffs[0] for d in diffs)


def _differing(a: Scenario, b: Scenario) -> set[str]:
    return {f.name for f in fields(a) if getattr(a, f.name) != getattr(b, f.name)}


class PoolExecutor(_Base):
    """A multiprocessing pool; the workload reaches each process once, through the initializer."""

    def __init__(self, workload: Workload, options: SearchOptions, workers: int) -> None:
        self.pool = multiprocessing.get_context().Pool(workers, _pool_init, (workload, options))
        self.reuse = options.reuse

    def run(self, configs: list[Scenario]) -> Iterator[tuple[int, dict[str, Any]]]:
        """One task per configuration; with `reuse`, one task per chain of neighbours (each row
        then comes back when its chain ends)."""
        if not self.reuse:
            yield from self.pool.imap_unordered(_pool_task, list(enumerate(configs)))
            return
        for rows in self.pool.imap_unordered(_pool_chain, groups(configs)):
            yield from rows

    def ends(self) -> Ends | None:
        """The interval's ends as tasks of one each (module doc): with two workers, one per worker."""
        return lambda jobs: self.pool.map(_pool_end, jobs, chunksize=1)

    def cancel(self) -> None:
        self.pool.terminate()

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


# ----- Ray --------------------------------------------------------------------------------------
_RAY_CACHE: dict[str, Any] = {}


def _ray_chain(refs: list[Any], job: list[tuple[int, Scenario]]) -> list[tuple[int, dict[str, Any]]]:
    """Runs on a Ray worker: one chain of neighbouring configurations, as the process pool runs it
    (so Ray, the pool and inline give the same rows). `refs` is wrapped in a list so Ray does not
    resolve it per task: each worker process fetches the workload and options once and keeps them."""
    import ray

    key = refs[0].hex()
    if _RAY_CACHE.get("key") != key:
        _RAY_CACHE.update(key=key, workload=ray.get(refs[0]), options=ray.get(refs[1]))
    rows = search_chain(_RAY_CACHE["workload"], [scenario for _, scenario in job], _RAY_CACHE["options"])
    return [(index, row) for (index, _), row in zip(job, rows, strict=True)]


def code_modules() -> list[str]:
    """The project packages a Ray task imports, shipped with runtime_env py_modules."""
    root = Path(__file__).resolve().parents[2]
    return [str(root / "sim"), str(root / "models")]


def connect_ray(address: str, num_cpus: int | None = None) -> None:
    """Join the cluster at `address` ("auto": a running one, else start a local instance)."""
    import ray

    if ray.is_initialized():
        return
    runtime_env = {"py_modules": code_modules()}
    if address != "auto":
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
        return
    try:
        ray.init(address="auto", runtime_env=runtime_env, log_to_driver=False)
    except ConnectionError:
        ray.init(num_cpus=num_cpus, include_dashboard=False, runtime_env=runtime_env, log_to_driver=False)


class RayExecutor(_Base):
    """One Ray task per chain of neighbours (per configuration without `reuse`), as the process pool;
    the workload goes into the object store once."""

    def __init__(self, workload: Workload, options: SearchOptions, address: str, workers: int) -> None:
        import ray

        connect_ray(address, num_cpus=workers if workers > 1 else None)
        self.ray, self.reuse = ray, options.reuse
        self.refs = [ray.put(workload), ray.put(options)]
        self.pending: dict[Any, int] = {}

    def run(self, configs: list[Scenario]) -> Iterator[tuple[int, dict[str, Any]]]:
        task = self.ray.remote(_ray_chain)
        jobs = groups(configs) if self.reuse else [[job] for job in enumerate(configs)]
        self.pending = {task.remote(self.refs, job): job[0][0] for job in jobs}
        while self.pending:
            done, _ = self.ray.wait(list(self.pending), num_returns=1)
            self.pending.pop(done[0])
            yield from self.ray.get(done[0])

    def cancel(self) -> None:
        for ref in self.pending:
            self.ray.cancel(ref, force=True)
        self.pending = {}
