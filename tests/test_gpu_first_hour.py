"""What would break in the first hour on a real GPU, shown on CPU (issue 16): Falcon's attention
registration, OPT's 2,048 positions in the budget pass, the budget ignoring memory outside PyTorch,
NVML numbering under CUDA_VISIBLE_DEVICES, the attention label after a fallback, fp8 KV indexing,
--weights without accelerate, and the warm-up before the clock starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpu_backend import attention, telemetry
from gpu_backend.batch import SeqChunk
from gpu_backend.executor import Executor, ModelRunner, RunConfig, run, warmup_chunks
from gpu_backend.memory import measure_kv_budget
from gpu_backend.model_loader import load_model
from gpu_backend.paged_cache import PagedKVCache
from sim.scenario import Scenario
from sim.trace.synthetic import synthetic
from tests.test_gpu_attention import expected_tokens, paged_generate, prompts, reference_model

CATALOG = Path(__file__).resolve().parent.parent / "models" / "catalog"
GiB = 1 << 30


def tiny_config(tmp_path, catalog: str, **shrink) -> str:
    cfg = json.loads((CATALOG / f"{catalog}.json").read_text())
    cfg.update(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=256, **shrink)
    path = tmp_path / f"{catalog}-tiny.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def paged_tokens_equal_generate(loaded, seed: int) -> None:
    spec = loaded.spec
    cache = PagedKVCache(spec.num_layers, 64, 4, spec.num_kv_heads, spec.head_dim, "fp32")
    ps = prompts(seed)
    assert paged_generate(ModelRunner(loaded, cache), ps, 6) == expected_tokens(reference_model(loaded), ps, 6)


@pytest.mark.parametrize("variant", [{}, {"new_decoder_architecture": True, "num_kv_heads": 2}])
def test_falcon_runs_paged_and_matches_generate(tmp_path, variant):
    """Falcon picks attention classes from its own table: it raised KeyError 'kvsim_paged'."""
    loaded = load_model(tiny_config(tmp_path, "falcon-7b", **variant), seed=4)
    assert type(loaded.model.transformer.h[0].self_attention).__name__ == "PagedFalconAttention"
    assert loaded.spec.num_kv_heads == (variant.get("num_kv_heads") or 1)
    paged_tokens_equal_generate(loaded, 4)


def test_opt_matches_generate(tmp_path):
    loaded = load_model(tiny_config(tmp_path, "opt-13b", ffn_dim=128, word_embed_proj_dim=64), seed=2)
    paged_tokens_equal_generate(loaded, 2)


class FakeMemory:
    """A device that reports what a test says: weights resident, a warm-up peak, non-PyTorch memory."""

    def __init__(self, total=80 * GiB, weights=16 * GiB, non_torch=2 * GiB, activations=3 * GiB) -> None:
        self.total, self.weights, self.non_torch, self.activations = total, weights, non_torch, activations
        self.calls: list[str] = []

    def reset_peak(self):
        self.calls.append("reset_peak")

    def synchronize(self):
        self.calls.append("synchronize")

    def empty_cache(self):
        self.calls.append("empty_cache")

    def allocated(self):
        return self.weights

    def peak_allocated(self):
        return self.weights + self.activations + self.scratch

    def free_and_total(self):
        return self.total - self.weights - self.non_torch, self.total

    scratch = 0


def warm_up_on(mem: FakeMemory):
    def forward():
        mem.calls.append("forward")
        mem.scratch = 1 * GiB  # the scratch pool the warm-up used: not an activation
        return mem.scratch

    return forward


def test_budget_counts_memory_outside_pytorch():
    mem = FakeMemory()
    r = measure_kv_budget(warm_up_on(mem), 0.9, mem, workspace=256 << 20)
    assert mem.calls.index("reset_peak") < mem.calls.index("forward") < mem.calls.index("synchronize")
    assert r.activation_peak == 3 * GiB
    assert r.kv_budget == int(80 * GiB * 0.9) - (16 + 2 + 3) * GiB - (256 << 20)
    other = FakeMemory(non_torch=5 * GiB)
    more_context = measure_kv_budget(warm_up_on(other), 0.9, other, workspace=256 << 20)
    assert r.kv_budget - more_context.kv_budget == 3 * GiB  # CUDA context / NCCL / cuBLAS now count


def test_opt_budget_pass_stays_within_its_positions(tmp_path):
    """The budget pass fed max_batched_tokens as one sequence: OPT with 64 positions (2,048 for real)
    overflowed its position table. Now the largest step is split into sequences it can hold."""
    model = tiny_config(tmp_path, "opt-13b", ffn_dim=128, word_embed_proj_dim=64, max_position_embeddings=64)
    loaded = load_model(model, seed=2)
    mem = FakeMemory(total=4 * GiB, weights=1 * GiB, non_torch=0, activations=0)
    sc = Scenario(model=model, kv_dtype="fp32", block_size=4, max_batched_tokens=256, max_num_seqs=8,
                  gpu_mem_util=0.5)
    ex = Executor(synthetic(2, 1e6, input="fixed:value=8", output="fixed:value=2"), sc, RunConfig(offline=True),
                  loaded=loaded, memory=mem)
    assert ex.budget is not None and ex.scenario.kv_budget_gib == ex.budget.kv_budget / GiB
    assert ex.run().summary["completed"] == 2


def test_warmup_chunks_respect_positions_and_seqs():
    chunks = warmup_chunks(8192, 2048, 256, 16)
    assert [c.num_new for c in chunks] == [2048] * 4 and sum(len(c.block_table) for c in chunks) == 512
    chunks = warmup_chunks(1000, 64, 8, 16)  # more tokens than 8 sequences of 64 hold: as many as allowed
    assert len(chunks) == 8 and sum(c.num_new for c in chunks) == 1000
    blocks = [b for c in chunks for b in c.block_table]
    assert blocks == list(range(len(blocks)))


class FakeNvml:
    def __init__(self):
        self.asked: list = []

    def nvmlDeviceGetHandleByIndex(self, i):
        self.asked.append(i)
        return i

    def nvmlDeviceGetHandleByUUID(self, u):
        self.asked.append(u)
        return u


def test_nvml_follows_cuda_visible_devices():
    nv = FakeNvml()
    assert telemetry.nvml_handle(nv, 0, {"CUDA_VISIBLE_DEVICES": "2,3"}) == 2
    assert telemetry.nvml_handle(nv, 1, {"CUDA_VISIBLE_DEVICES": "2, 3"}) == 3
    assert telemetry.nvml_handle(nv, 0, {}) == 0
    assert telemetry.nvml_handle(nv, 0, {"CUDA_VISIBLE_DEVICES": "GPU-5f0c"}) == "GPU-5f0c"
    with pytest.raises(ValueError, match="not visible"):
        telemetry.nvml_device(1, {"CUDA_VISIBLE_DEVICES": "3"})


def test_gpu_status_asks_nvml_for_the_physical_gpu(monkeypatch):
    class Nvml(FakeNvml):
        def nvmlDeviceGetName(self, h):
            return b"H100"

        def nvmlSystemGetDriverVersion(self):
            return "580"

        def nvmlDeviceGetMemoryInfo(self, h):
            return type("M", (), {"total": 80 * GiB, "used": GiB})()

    nv = Nvml()
    monkeypatch.setattr(telemetry, "_nvml", lambda: nv)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert telemetry.gpu_status(0).present and nv.asked == [5]


@pytest.fixture
def flex_fails(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("no triton here")

    monkeypatch.setattr(attention, "_flex_path", boom)
    monkeypatch.setattr(attention._FlexState, "failure", None)
    yield


def test_attention_label_after_fallback(flex_fails):
    res = run(synthetic(2, 1e6, input="fixed:value=8", output="fixed:value=3"),
              Scenario(model="tiny-llama", kv_dtype="fp32", kv_budget_gib=0.001, block_size=4),
              RunConfig(offline=True, impl="flex"))
    s = res.summary
    assert s["attention"] == "sdpa" and s["attention_requested"] == "flex"
    assert "no triton here" in s["attention_fallback"] and s["attention_steps"] == {"sdpa": s["num_steps"]}


def test_fp8_pool_never_indexes_a_float8_tensor():
    """Index kernels for float8 are missing on some CUDA builds; the pool indexes uint8 bytes instead."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Dtypes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.startswith("index") or func.__name__ == "copy_":  # not dtype conversions
                seen.extend(a.dtype for a in args if isinstance(a, torch.Tensor))
            return func(*args, **(kwargs or {}))

    cache = PagedKVCache(2, 9, 4, 2, 8, "fp8")
    k = torch.randn(10, 2, 8)
    with Dtypes():
        cache.write(1, torch.tensor(cache.slots([5, 2, 7], 0, 10)), k, k)
        gk, _ = cache.gather(1, torch.tensor([PagedKVCache.physical([5, 2, 7])]))
    assert seen and torch.float8_e4m3fn not in seen
    assert torch.allclose(gk[0, :10], k, atol=0.2) and cache.pool_bytes == 2 * 2 * 9 * 4 * 2 * 8 + 2 * 2 * 4


def test_weights_dir_loads_without_accelerate(tmp_path):
    src = load_model("tiny-llama", seed=6)
    src.model.save_pretrained(tmp_path)
    loaded = load_model("tiny-llama", weights=str(tmp_path))
    for (name, a), (_, b) in zip(src.model.state_dict().items(), loaded.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    paged_tokens_equal_generate(loaded, 6)


def test_warm_up_runs_before_the_clock(monkeypatch):
    calls = []
    real = ModelRunner.logits

    def counting(self, chunks, tokens):
        calls.append(sum(c.num_new for c in chunks))
        return real(self, chunks, tokens)

    monkeypatch.setattr(ModelRunner, "logits", counting)
    sc = Scenario(model="tiny-llama", kv_dtype="fp8", kv_budget_gib=0.001, block_size=4)
    ex = Executor(synthetic(2, 1e6, input="fixed:value=8", output="fixed:value=3"), sc, RunConfig(offline=True))
    res = ex.run()
    steps = res.summary["num_steps"]
    assert len(calls) == steps + 2 and calls[1] == 1  # one warm-up prefill, one warm-up decode
    assert res.summary["warmup_s"] > 0 and len(res.extra["step_log"]) == steps
    assert all(ex.cache.fp8_calibrated)  # calibrated again by the real run's first writes


def test_seq_chunk_is_the_same_class_everywhere():
    assert attention.SeqChunk is SeqChunk
