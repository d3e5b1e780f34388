"""Speculative decoding as a serving answer: time per output token, throughput, speed-up, the
KV it adds and the $ per 1M tokens it leads to (``kvlib.speculative_decode``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..deployment import Deployment
from ..engines.pools import AnyPool, kv_pool
from ..engines.speculative import draft_kv_bytes_per_token, lookahead_tokens
from ..speed.speculative import SpeculativeStep, speculative_step
from .cost import cost_per_million_tokens

if TYPE_CHECKING:
    from .serving import ServingPoint


@dataclass(frozen=True)
class SpeculativeDecode:
    """Decoding ``batch`` requests at ``context_tokens`` with and without speculation.

    step: the ``SpeculativeStep``; tpot_s / base_tpot_s: time per output token with / without;
    tokens_per_s / base_tokens_per_s: output tokens the group emits per second;
    extra_kv_bytes_per_token: KV bytes the draft adds per token held, on one GPU;
    lookahead_tokens: KV slots reserved past each running request; pool_tokens /
    base_pool_tokens: tokens vLLM's pool holds with / without the draft (its layers and weights);
    dollars_per_million / base_dollars_per_million: at ``dollars_per_hour`` for the group
    (None when no price was given).
    """

    step: SpeculativeStep
    extra_kv_bytes_per_token: int
    lookahead_tokens: int
    pool_tokens: int
    base_pool_tokens: int
    dollars_per_hour: float | None = None

    @property
    def tpot_s(self) -> float:
        return self.step.tpot_s

    @property
    def base_tpot_s(self) -> float:
        return self.step.decode_s

    @property
    def speedup(self) -> float:
        return self.step.speedup

    @property
    def tokens_per_s(self) -> float:
        return self.step.batch / self.step.tpot_s

    @property
    def base_tokens_per_s(self) -> float:
        return self.step.batch / self.step.decode_s

    @property
    def dollars_per_million(self) -> float | None:
        if self.dollars_per_hour is None:
            return None
        return cost_per_million_tokens(self.dollars_per_hour, self.tokens_per_s)

    @property
    def base_dollars_per_million(self) -> float | None:
        if self.dollars_per_hour is None:
            return None
        return cost_per_million_tokens(self.dollars_per_hour, self.base_tokens_per_s)


def draft_pools(deployment: Deployment) -> tuple[AnyPool, int]:
    """vLLM's pool with the deployment's draft (its layers' KV and its weights), and the
    tokens the pool holds without it."""
    return kv_pool(deployment), kv_pool(deployment.with_(speculative=None)).tokens


def speculative_decode(deployment: Deployment, batch: int, context_tokens: int, *,
                       dollars_per_hour: float | None = None,
                       pools: tuple[AnyPool, int] | None = None) -> SpeculativeDecode:
    """Speculative decoding of ``batch`` requests at ``context_tokens`` cached tokens each, for a
    deployment that names ``speculative`` (public API, ``kvlib.speculative_decode``): TPOT,
    tokens/s and speed-up against the same batch without speculation, the draft's KV bytes per
    token and the pool with and without it; $ per 1M output tokens at ``dollars_per_hour`` for
    the whole group. ``pools``: ``draft_pools(deployment)``, where the caller has it already.
    E.g. DeepSeek-V3 with MTP, ``Deployment("deepseek-v3", "h200", tp=8, weights="fp8",
    speculative="mtp:1:0.85")``."""
    step = speculative_step(deployment, batch, context_tokens)
    pool, base_tokens = pools or draft_pools(deployment)
    return SpeculativeDecode(step=step,
                             extra_kv_bytes_per_token=draft_kv_bytes_per_token(deployment),
                             lookahead_tokens=lookahead_tokens(deployment),
                             pool_tokens=pool.tokens, base_pool_tokens=base_tokens,
                             dollars_per_hour=dollars_per_hour)


def speculative_at_point(deployment: Deployment, point: ServingPoint, *,
                         dollars_per_hour: float | None = None,
                         pools: tuple[AnyPool, int] | None = None) -> SpeculativeDecode:
    """``speculative_decode`` for a serving point of the same deployment without speculation
    (``serving_point``): at the point's batch, or as many requests of its length as the pool
    holds once the draft's weights, its KV and k lookahead slots per request take their share,
    if fewer; at the mean decode context, input + output ÷ 2 tokens. ValueError when that pool
    holds no request of ``max_model_len`` (the point's length when unset): vLLM would not
    start. ``pools`` as for ``speculative_decode``."""
    pools = pools or draft_pools(deployment)
    pool = pools[0]
    length = point.input_tokens + point.output_tokens
    limit = deployment.max_model_len or length
    if pool.max_concurrency(limit) < 1:
        raise ValueError(f"with the draft's weights and KV the pool holds no request of "
                         f"{limit:,} tokens: vLLM would not start")
    room = pool.max_concurrency(length + lookahead_tokens(deployment))
    return speculative_decode(deployment, min(point.batch, int(room)),
                              point.input_tokens + point.output_tokens // 2,
                              dollars_per_hour=dollars_per_hour, pools=pools)
