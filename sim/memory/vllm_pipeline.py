"""Pipeline parallelism at vLLM's start-up: which layers each stage holds, and what else it keeps.

Read in the vLLM 0.19.0 wheel:
- distributed/utils.py `get_pp_indices`: layers // pp per stage; the remainder goes one each to the
  stages before the last, from the second-to-last backwards (the last holds the head and norm);
  VLLM_PP_LAYER_PARTITION overrides it ("8,8,8,8").
- models/llama.py (and the other decoder files): the first stage builds the input embedding, the last
  the final norm and lm_head (a tied head builds its own embedding); other modules are PPMissingLayer.
- v1/worker/gpu_model_runner.py `_dummy_run`: a stage after the first keeps `intermediate_tensors`,
  the hidden states and residual it receives, [max_num_tokens, hidden] each at the model dtype
  (`make_empty_intermediate_tensors`), allocated by the profile run and kept; `profile_run` runs the
  dummy sampler on the last stage only.
- v1/core/kv_cache_utils.py `get_kv_cache_configs`: each stage sizes its own pool from its own free
  memory and layers, then "Change the num_blocks of each rank to the smallest among all ranks"; with
  several KV kinds each stage keeps the model's groups, its block as many pages as the most layers of
  one group it holds (sim/memory/vllm_pool.py `stage_layout`).
- models/gemma3_mm.py, mistral3.py: a multimodal model builds its image encoder on every rank; the V1
  runner's `profile_run` encodes the dummy images on each, Model Runner V2's on the first only.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.spec import ModelSpec, SpecError

INTERMEDIATE_TENSORS = 2  # hidden_states and residual (make_empty_intermediate_tensors_factory in llama.py, qwen2.py, ...)
SOURCE = ("vLLM 0.19.0's distributed/utils.py get_pp_indices (layers per stage), models/llama.py (embedding on the "
          "first stage, norm and lm_head on the last), gpu_model_runner.py (the sampler on the last stage, "
          "intermediate_tensors kept by later stages) and kv_cache_utils.py get_kv_cache_configs (every stage takes "
          "the least stage's num_blocks)")


@dataclass(frozen=True)
class PipelineStage:
    """One pipeline-parallel rank's share of the decoder."""

    rank: int
    pp: int
    start_layer: int
    layers: int

    @property
    def first(self) -> bool:
        return self.rank == 0

    @property
    def last(self) -> bool:
        return self.rank == self.pp - 1

    def spec(self, model: ModelSpec) -> ModelSpec:
        """The model's part on this stage (ModelSpec.pipeline_stage)."""
        return model.pipeline_stage(self.start_layer, self.layers, self.first, self.last)


def pp_partition(num_layers: int, pp: int, partition: str | None = None) -> list[int]:
    """Layers per stage as vLLM's get_pp_indices splits them (`partition`: VLLM_PP_LAYER_PARTITION)."""
    if pp < 1 or pp > num_layers:
        raise SpecError(f"pipeline parallel size {pp}: must be 1 to the model's {num_layers} layers")
    if partition:
        try:
            parts = [int(p) for p in partition.split(",")]
        except ValueError:
            raise SpecError(f"layer partition {partition!r}: expected comma-separated layer counts such as 8,8,8,8") from None
        if len(parts) != pp or sum(parts) != num_layers or min(parts) < 1:
            raise SpecError(f"layer partition {partition!r}: needs {pp} positive counts adding up to {num_layers} layers")
        return parts
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def pipeline_stages(num_layers: int, pp: int, partition: str | None = None) -> tuple[PipelineStage, ...]:
    parts = pp_partition(num_layers, pp, partition)
    starts = [sum(parts[:i]) for i in range(pp)]
    return tuple(PipelineStage(r, pp, starts[r], parts[r]) for r in range(pp))


def intermediate_tensor_bytes(stage: PipelineStage | None, spec: ModelSpec, max_num_tokens: int, act_bytes: int) -> int:
    """The received hidden states and residual a stage after the first keeps (0 on the first or without PP)."""
    if stage is None or stage.first:
        return 0
    return INTERMEDIATE_TENSORS * max_num_tokens * spec.hidden_size * act_bytes
