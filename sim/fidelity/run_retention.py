"""The prefix-cache retention interval a measured run had (vLLM's `prefix_cache_retention_interval`).

It decides which sliding-window and state blocks vLLM's prefix cache keys (sim/core/kv/sliding_retention.py),
so a replay of a hybrid model's run with the wrong one finds other hits. A run says it in
kv_cache.prefix_cache_retention_interval (the `vllm:cache_config_info` label `sim observe` copies:
"0", "512", "None") or engine_kwargs.prefix_cache_retention_interval (vLLM's EngineArgs field). A run
that does not say gets the default of its vLLM version:

- before 0.23 vLLM had no retention rule: every full sliding block was keyed (None);
- 0.23 (vllm-project/vllm PR #43447, merged 2026-06-04) to 0.28: the rule exists behind the env var
  VLLM_PREFIX_CACHE_RETENTION_INTERVAL, unset = None (dense; "in every checked release from v0.25.0
  through v0.28.0, leaving the variable unset selects None", vllm-project/vllm issue #48435);
- PR #52216 (merged 2026-08-17, not in 0.28.0) made it an argument with default 0: the first release
  after 0.28 on (0.32's config/cache.py reads `Field(default=0, ge=0)`).

A run whose version is missing or unreadable gets 0, the default of the newest version read.
Not modelled: PR #55760's default of None for Mamba models under EAGLE (kvsim has no EAGLE).
"""

from __future__ import annotations

from typing import Any

FIRST_DEFAULT_ZERO = (0, 29)  # the first release after 0.28.0 carries PR #52216's default 0
NEWEST_DEFAULT = 0  # vLLM 0.32's, kvsim's Scenario default


class RetentionError(ValueError):
    """A recorded interval that is not a whole number of tokens >= 0 or None."""


def recorded_interval(value: Any, key: str) -> int | None:
    """A recorded interval: an int >= 0, or None / "None" / "null" (every block); labels come as text."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null")):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise RetentionError(f"{key} must be a whole number of tokens >= 0 or None, got {value!r}")


def version_default(vllm_version: str) -> int | None:
    """The interval vLLM used when the run did not set one (module doc)."""
    parts = str(vllm_version or "").strip().lstrip("v").split(".")
    try:
        version = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return NEWEST_DEFAULT
    return NEWEST_DEFAULT if version >= FIRST_DEFAULT_ZERO else None


def run_retention(kv_cache: dict[str, Any], engine_kwargs: dict[str, Any], vllm_version: str, where: str) -> int | None:
    """The run's interval: recorded (kv_cache first: what the engine ran with), else its version's default."""
    for section, values in (("kv_cache", kv_cache), ("engine_kwargs", engine_kwargs)):
        if "prefix_cache_retention_interval" in values:
            return recorded_interval(values["prefix_cache_retention_interval"],
                                     f"{where}: {section}.prefix_cache_retention_interval")
    return version_default(vllm_version)
