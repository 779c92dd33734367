"""AppTest: the Capacity planner page reproduces the seed tables and reports bad combinations."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from ui.capacity_view import PER_TOKEN

PAGE = str(Path(__file__).resolve().parent.parent / "app_pages" / "capacity.py")


def page(**params) -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.query_params.update(params)
    return at.run()


QWEN_H100 = dict(cap_models="qwen2.5-7b", cap_gpus="h100-sxm")  # the seed facts' deployment


def test_default_is_the_dashboards_one_default_scenario():
    """Capacity opens on the scenario Plan and Simulate open on (ui/defaults.py): llama-3-8b on an RTX 4090."""
    from ui.defaults import DEFAULT_SCENARIO

    at = page()
    assert not at.exception and not at.error
    assert at.multiselect(key="cap_models").value == [DEFAULT_SCENARIO.model]
    assert at.multiselect(key="cap_gpus").value == [DEFAULT_SCENARIO.gpu]
    assert at.markdown[0].value.startswith(f"### {DEFAULT_SCENARIO.model} on one {DEFAULT_SCENARIO.gpu} ")


def test_seed_table_qwen25_7b_on_h100():
    """seed_facts.md: 504 / 126 / 31 / 7 concurrent requests at 2K / 8K / 32K / 128K, 56 KiB per token."""
    at = page(**QWEN_H100)
    assert not at.exception and not at.error
    row = at.dataframe[1].value.iloc[0]
    assert row[PER_TOKEN] == 57_344
    assert [row[f"sequences at {c // 1024}K"] for c in (2048, 8192, 32768, 131072)] == [504, 126, 31, 7]
    assert 54.5 < row["KV cache per GPU (GiB)"] < 55.5
    need = at.dataframe[0].value.iloc[0]
    assert need["GPUs"] == 1 and need["sequences per replica"] == 126  # 100 users at 8,192 tokens fit on one H100
    # the answer comes first, in one sentence (the example)
    assert at.markdown[0].value == ("### qwen2.5-7b on one h100-sxm at 8,192-token context (bf16 KV): "
                                    "126 concurrent sequences; 1 GPU for 100 users.")
    assert "KV B/token/GPU" not in row
    assert len(at.get("plotly_chart")) == 3  # curves + budget pie + KV groups


def test_models_gpus_dtypes_from_widgets():
    at = page()
    at.multiselect(key="cap_models").set_value(["llama-2-7b", "llama-3-8b"])
    at.multiselect(key="cap_kv").set_value(["bf16", "int4"]).run()
    table = at.dataframe[1].value
    assert len(table) == 4
    per_token = dict(zip(zip(table["model"], table["kv dtype"], strict=True), table[PER_TOKEN], strict=True))
    assert per_token[("llama-2-7b", "bf16")] == 524_288 and per_token[("llama-3-8b", "bf16")] == 131_072
    assert per_token[("llama-3-8b", "int4")] == 2 * 32 * 8 * (64 + 4)  # 0.5 B/elem + 4 B scale per head per token
    at.number_input(key="cap_users").set_value(5000).run()
    assert (at.dataframe[0].value["GPUs"] > 1).all()


def test_tp_that_does_not_divide_heads_is_a_message():
    at = page(cap_tp="8", **QWEN_H100)  # qwen2.5-7b has 28 attention heads
    assert not at.exception
    assert at.error and "tp=8" in at.error[0].value and "\n" not in at.error[0].value


def test_kv_groups_chart_for_a_sliding_window_model():
    at = page(cap_models="gpt-oss-120b", cap_w="native", cap_ctx="8192")
    assert not at.exception and not at.error
    assert at.dataframe[1].value.iloc[0][PER_TOKEN] == 36 * 8 * 64 * 2 * 2  # one token in every layer
    groups = at.get("plotly_chart")[2].proto.spec
    assert "sliding(128)" in groups and "full" in groups


def test_out_of_range_users_in_a_link_are_named():
    at = page(cap_users="99999999999")
    assert at.warning[0].value == ("The link's cap_users=99999999999 is out of range (1 to 10,000,000); "
                                   "using the default instead.")
    assert "100 users" in at.markdown[0].value  # the fallback is the visible default


def test_seed_table_headers_are_short_enough_to_fit():
    """The loaded screenshot cut the last column ("sequences a...") off: the display headers are "at 8K"
    under the heading "Concurrent sequences that fit", the data keeps its full column names."""
    import json

    at = page()
    shown = json.loads(at.dataframe[1].proto.columns)
    assert [shown[f"sequences at {k}K"]["label"] for k in (2, 8, 32, 128)] == ["at 2K", "at 8K", "at 32K", "at 128K"]
    assert "sequences at 128K" in at.dataframe[1].value


def test_vllm_pool_beside_the_budget():
    """Beside the pie: the pool vLLM itself would size (num_gpu_blocks) and its terms."""
    from models.gpus import get_gpu
    from models.spec import load_spec
    from sim.memory.vllm_profile import vllm_memory_profile

    at = page(**QWEN_H100)
    assert not at.exception and not at.error
    blocks = vllm_memory_profile(load_spec("qwen2.5-7b"), get_gpu("h100-sxm")).num_gpu_blocks
    text = " ".join(m.value for m in at.markdown)
    assert f"would size {blocks:,} blocks" in text and "Maximum concurrency" in text
    assert "a start may get" in text and "first start's compile scratch" in text and "warm torch.compile cache" in text
    assert "20 MiB allocator segment" in text  # the default 0.32 accounting subtracts the CUDA-graph estimate
    terms = [d.value for d in at.dataframe if "term" in d.value.columns][0]
    assert terms["term"].iloc[-1] == "= KV pool" and len(terms) == 7


def test_planner_tables_resolve_each_budget_once(monkeypatch):
    """Each model x GPU x KV dtype is resolved once through sim.run.deployment.Sizing: one memory
    budget each (the tables computed it three times before), the same figures as before."""
    import sim.memory.capacity as cap
    import sim.run.deployment as dep
    from models.gpus import get_gpu
    from models.spec import load_spec
    from ui.capacity_view import planner_tables

    calls = []
    real = cap.memory_budget

    def counting(*args, **kwargs):
        calls.append(args[:2])
        return real(*args, **kwargs)

    monkeypatch.setattr(cap, "memory_budget", counting)
    monkeypatch.setattr(dep, "memory_budget", counting)
    _, table, need, errors = planner_tables(["llama-3-8b", "qwen2.5-7b"], ["h100-sxm"], ["bf16", "fp8"], tp=1,
                                            gpu_mem_util=0.9, weight_dtype="native", users=1000, context=8192)
    assert not errors and len(calls) == 4 and len(table) == len(need) == 4
    spec = load_spec("llama-3-8b")
    budget = real(spec, get_gpu("h100-sxm"), kv_dtype="fp8")
    row = table[(table["model"] == "llama-3-8b") & (table["kv dtype"] == "fp8")].iloc[0]
    assert row["sequences at 8K"] == cap.max_concurrent(budget, 8192, spec)


def test_async_scheduling_moves_the_startup_line():
    """gpt-oss-20b on an H100: vLLM 0.32's 'Maximum concurrency' counts its sliding layers' window
    plus 2 x max_num_batched_tokens with async scheduling (the default) and 1 x with it off, the
    figures `sim capacity` gives (tests/test_async_scheduling.py checks them by hand)."""
    import re

    from sim.memory.capacity import capacity_table
    from sim.memory.vllm_profile import add_vllm_pool
    from sim.run.deployment import Sizing
    from sim.scenario import Scenario

    sizing = Sizing.of(Scenario(model="gpt-oss-20b", gpu="h100-sxm"))  # as `sim capacity` sizes it
    spec, gpu = sizing.spec, sizing.gpu
    shown, want = {}, {}
    for label, setting in (("vLLM's default (on for a GPU)", None), ("off", False)):
        at = page(cap_models="gpt-oss-20b", cap_gpus="h100-sxm", **({} if setting is None else {"cap_async": label}))
        assert not at.exception and not at.error
        text = " ".join(m.value for m in at.markdown)
        shown[setting] = re.search(r"tokens per request: ([0-9.]+)x", text).group(1)
        table = capacity_table(spec, gpu, [8192], budget=sizing.budget, **sizing.budget_args())
        a = add_vllm_pool(table, spec, gpu, async_scheduling=setting)["assumptions"]
        want[setting] = f"{a['vllm_logged_max_concurrency']['concurrency']:.2f}"
    assert shown == want and shown[None] != shown[False]


def test_pipeline_stages_size_the_stage_that_sets_the_pool():
    """Pipeline stages: every figure is the binding stage's GPU (sim.memory.capacity.pipeline_budget), the
    GPUs count every stage, and vLLM's pool is the least stage's; a model it cannot split is one line."""
    from models.gpus import get_gpu
    from models.spec import load_spec
    from sim.memory.capacity import max_concurrent, pipeline_budget
    from sim.memory.vllm_profile import vllm_memory_profile

    spec, gpu = load_spec("llama-3.1-8b"), get_gpu("h100-sxm")
    at = page(cap_pp="2", cap_models="llama-3.1-8b", cap_gpus="h100-sxm")
    assert not at.exception and not at.error
    part, budget, _ = pipeline_budget(spec, gpu, 2)
    row, need = at.dataframe[1].value.iloc[0], at.dataframe[0].value.iloc[0]
    assert row["sequences at 8K"] == max_concurrent(budget, 8192, part) and row[PER_TOKEN] == 65_536
    assert need["pp"] == 2 and need["GPUs"] == 2 * need["replicas"]
    assert at.markdown[0].value.startswith("### llama-3.1-8b on 2 x h100-sxm (2 pipeline stages) at 8,192-token")
    blocks = vllm_memory_profile(spec, gpu, pp=2).num_gpu_blocks
    assert f"would size {blocks:,} blocks" in " ".join(m.value for m in at.markdown)
    bad = page(cap_pp="2", cap_models="opt-13b", cap_gpus="h100-sxm")
    assert not bad.exception and bad.error and "pipeline parallelism is not modelled" in bad.error[0].value
    assert "\n" not in bad.error[0].value
