"""The bundled default the dashboard opens on (Plan and Simulate): a scenario where KV memory binds.

llama-3-8b on one RTX 4090 (24 GB): bf16 weights take 15 GiB, leaving a KV pool of 4.6 GiB
(about 37,000 tokens at 128 KiB per token). The workload is samples/azure_conv_slice.csv, a slice
of the real Azure LLM inference trace (conversation, 2023; every second request of rows
8,000-8,599: 300 requests over 87 s, 3.4 requests/s). Replayed as recorded it fills the pool: the
peak is 100%, 14 requests are preempted and what binds is KV memory, while the queue keeps up
(0.7 requests waiting on average). So every KV choice visibly changes the answer
(tests/test_default_story.py): contiguous allocation with max reservation or MHA instead of GQA
swamps the queue (~100 waiting), pow2 and oracle reservations recover most of it, fp8 KV ends the
preemptions; the Plan page's search finds the 4090 KV-bound at bf16 (3.0 requests/s under
ttft_p99=2, tpot_p99=0.1) and compute-bound at fp8 (4.1 requests/s).
"""

from __future__ import annotations

from sim.scenario import Scenario

DEFAULT_SCENARIO = Scenario(model="llama-3-8b", gpu="rtx-4090")
DEFAULT_SAMPLE = "azure_conv_slice.csv"
PLAN_GPUS = (DEFAULT_SCENARIO.gpu, "l40s")  # the default sweep: the 24 GB card and a 48 GB one
