"""Paged attention is exact: greedy tokens equal the model's own generate() (fp32, CPU), for Llama,
Qwen2 and Mistral, with several prompts of different lengths in one ragged batch, block tables from
the real PagedAllocator, both attention paths, and chunked prefill mixed with decode."""

from __future__ import annotations

import pytest
import torch

from gpu_backend.attention import SeqChunk
from gpu_backend.executor import ModelRunner
from gpu_backend.model_loader import load_model
from gpu_backend.paged_cache import PagedKVCache
from sim.core.kv.paged import PagedAllocator

ARCHS = {"tiny-llama": 1, "qwen2-tiny": 2, "mistral-tiny": 3}  # catalog name -> weight seed
PROMPT_LENS = (5, 17, 33)
NEW_TOKENS = 10
BLOCK = 4
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def reference_model(loaded, dtype=torch.float32):
    """The same weights under transformers' own SDPA attention."""
    from transformers import AutoModelForCausalLM

    cfg = loaded.model.config.__class__.from_dict(loaded.model.config.to_dict())
    ref = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    ref.load_state_dict(loaded.model.state_dict())
    return ref.eval()


def prompts(seed: int, lens=PROMPT_LENS) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 256, (n,), generator=g).tolist() for n in lens]


def paged_generate(runner: ModelRunner, prompt_ids: list[list[int]], new: int, chunk: int | None = None,
                   alloc=None, keep: bool = False):
    """Greedy decoding of all prompts together; prefill in chunks of `chunk` tokens (None = whole),
    so with chunks some requests decode while others still prefill (mixed batches). Block tables
    come from `alloc` (a fresh PagedAllocator by default); contiguous ones reserve the final length;
    `keep` leaves the requests allocated so the caller can inspect the tables."""
    cache = runner.cache
    alloc = alloc or PagedAllocator(cache.usable_blocks, cache.block_size, 1)
    toks = [list(p) for p in prompt_ids]
    done_prefill = [0] * len(toks)
    for _ in range(10_000):
        chunks, feed, who = [], [], []
        for r, tk in enumerate(toks):
            if len(tk) - len(prompt_ids[r]) >= new:
                continue
            c = done_prefill[r]
            n = len(tk) - c if chunk is None else min(chunk, len(tk) - c)
            if c == 0:
                final = len(prompt_ids[r]) + new
                alloc.allocate(r, n, final, final)
            else:
                assert alloc.append(r, n)
            chunks.append(SeqChunk(alloc.block_table(r), c, n))
            feed.append(tk[c:c + n])
            who.append(r)
        if not chunks:
            if not keep:
                for r in range(len(toks)):
                    alloc.free(r)
            return toks
        nxt = runner.greedy(chunks, feed)
        for r, ch, t in zip(who, chunks, nxt, strict=True):
            done_prefill[r] = ch.context_len
            if ch.context_len == len(toks[r]):  # whole known sequence computed: keep the sample
                toks[r].append(t)
    raise AssertionError("decoding did not finish")


@pytest.fixture(scope="module", params=list(ARCHS))
def arch(request):
    loaded = load_model(request.param, seed=ARCHS[request.param])
    return request.param, loaded, reference_model(loaded)


def expected_tokens(ref, prompt_ids, new=NEW_TOKENS):
    out = []
    for p in prompt_ids:
        r = ref.generate(torch.tensor([p]), max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
        out.append(r[0].tolist())
    return out


@pytest.mark.parametrize("impl", ["sdpa", "flex"])
def test_tokens_equal_generate(arch, impl):
    name, loaded, ref = arch
    spec = loaded.spec
    cache = PagedKVCache(spec.num_layers, 64, BLOCK, spec.num_kv_heads, spec.head_dim, "fp32")
    ps = prompts(ARCHS[name])
    got = paged_generate(ModelRunner(loaded, cache, impl), ps, NEW_TOKENS)
    assert got == expected_tokens(ref, ps)


def test_chunked_prefill_mixed_with_decode(arch):
    name, loaded, ref = arch
    spec = loaded.spec
    cache = PagedKVCache(spec.num_layers, 64, BLOCK, spec.num_kv_heads, spec.head_dim, "fp32")
    ps = prompts(ARCHS[name] + 10)
    got = paged_generate(ModelRunner(loaded, cache, "sdpa"), ps, NEW_TOKENS, chunk=7)
    assert got == expected_tokens(ref, ps)


BF16_LOGIT_TOL = 0.01  # max |logit diff| vs transformers own bf16 SDPA (measured 0.002, logits ~0.5)


def test_bf16_logits_within_tolerance():
    loaded = load_model("tiny-llama", dtype="bf16", seed=5)
    ref = reference_model(loaded, torch.bfloat16)
    spec = loaded.spec
    cache = PagedKVCache(spec.num_layers, 64, BLOCK, spec.num_kv_heads, spec.head_dim, "bf16", torch.bfloat16)
    alloc = PagedAllocator(cache.usable_blocks, BLOCK, 1)
    ps = prompts(7)
    chunks = []
    for r, p in enumerate(ps):
        alloc.allocate(r, len(p), len(p), 0)
        chunks.append(SeqChunk(alloc.block_table(r), 0, len(p)))
    ours = ModelRunner(loaded, cache, "sdpa").logits(chunks, ps)
    with torch.inference_mode():
        theirs = torch.stack([ref(torch.tensor([p])).logits[0, -1].float() for p in ps])
    assert (ours - theirs).abs().max().item() <= BF16_LOGIT_TOL
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
