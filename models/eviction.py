"""Bounding KV by eviction: cap the tokens each sequence keeps, whatever the model.

Three published policies, all simulated as a cap on the tokens kept per sequence in every layer
that keeps tokens (a state has nothing to evict):
- window:N    sliding-window attention over any model (keep the last N tokens);
- streaming:S+R  StreamingLLM (Xiao et al., 2023): S attention-sink tokens at the start plus the R
  most recent, S + R kept (the sinks' blocks are counted as part of the window: a paged cache
  would hold ceil(S / block_size) extra blocks at most);
- h2o:N      H2O heavy-hitter oracle (Zhang et al., 2023): a budget of N tokens chosen by
  accumulated attention; memory-wise a cache of N tokens, compacted as tokens are evicted.

OUTPUT QUALITY IS NOT MODELLED: these policies drop context the model may need; kvsim only counts
the memory and batch-size gain. The step time still reads each sequence's whole context (an
upper bound: an evicting kernel reads at most the cap).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from models.kv_groups import KVGroup

POLICIES = ("window", "streaming", "h2o")
QUALITY_NOTE = "output quality is not modelled: evicted tokens may matter to the model"


class EvictionError(ValueError):
    """A bad eviction spec; the message is one line."""


@dataclass(frozen=True)
class Eviction:
    """One eviction policy and the tokens it keeps per sequence."""

    policy: str
    tokens: int  # tokens kept per sequence in every layer that keeps tokens
    sinks: int = 0  # streaming only: how many of them are the first tokens

    def text(self) -> str:
        if self.policy == "streaming":
            return f"streaming:{self.sinks}+{self.tokens - self.sinks}"
        return f"{self.policy}:{self.tokens}"


def parse_eviction(text: str | None) -> Eviction | None:
    """"window:4096", "streaming:4+2044" (sinks + recent) or "h2o:2048"; None or "" = no eviction."""
    if text is None or not str(text).strip():
        return None
    name, _, arg = str(text).strip().lower().partition(":")
    if name not in POLICIES or not arg:
        raise EvictionError(f"kv eviction {text!r}: expected window:N, streaming:SINKS+RECENT or h2o:N")
    try:
        parts = [int(p) for p in arg.split("+")] if name == "streaming" else [int(arg)]
    except ValueError:
        raise EvictionError(f"kv eviction {text!r}: token counts must be integers") from None
    if name == "streaming":
        if len(parts) != 2 or parts[0] < 0 or parts[1] < 1:
            raise EvictionError(f"kv eviction {text!r}: streaming needs SINKS+RECENT, e.g. streaming:4+2044")
        return Eviction(name, parts[0] + parts[1], sinks=parts[0])
    if parts[0] < 1 or parts[0] > 1 << 24:
        raise EvictionError(f"kv eviction {text!r}: keep between 1 and {1 << 24} tokens")
    return Eviction(name, parts[0])


def capped_groups(groups: tuple[KVGroup, ...], eviction: Eviction | None) -> tuple[KVGroup, ...]:
    """The groups with every token-keeping group capped at the policy's tokens (states unchanged)."""
    if eviction is None:
        return groups
    return tuple(dataclasses.replace(g, cap=min(eviction.tokens, g.cap or eviction.tokens)) if g.grows else g
                 for g in groups)
