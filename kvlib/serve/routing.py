"""Cache-aware routing: which replica serves a request decides whether its prefix is cached.

``route_requests(requests, n_replicas, policy)`` sends requests in arrival order to one of
``n_replicas`` engines, each with its own vLLM prefix cache (``kvlib.engines.prefix.VllmBlockCache``), and
reports the hits and how evenly the requests were spread. Policies:

* ``"round_robin"`` — request i to replica i mod R: even load, prefixes scattered;
* ``"session"`` — every request of a session (a conversation, an agent run) to one replica
  (a hash of the session id; sticky sessions);
* ``"prefix"`` — to the replica that holds the longest prefix of the request, ties and misses
  to the least-loaded replica, as SGLang's cache-aware router does with its per-worker radix
  trees and llm-d's prefix-cache scorer with KV events; with ``load_bound`` c, a replica that
  has already taken more than c × its fair share of the requests so far (c · i / R) is skipped —
  the bounded-load rule of consistent hashing (Mirrokni, Thorup and Zadimoghaddam, SODA 2018),
  standing in for the routers' load thresholds;
* ``"least_load"`` — to the replica that has taken the fewest requests (perfect balance).

The router knows each cache exactly (llm-d's precise scorer; SGLang's router approximates it
with the prompts it has routed). Load is the count of requests routed so far: the simulation
has no clock, so in-flight queues are not modelled.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.checks import number, positive_integer
from ..engines.prefix import BlockTrace, VllmBlockCache, block_level

POLICIES = ("round_robin", "session", "prefix", "least_load")


@dataclass(frozen=True)
class RoutingResult:
    """Per request: the replica it went to and the prompt tokens its prefix cache served."""

    policy: str
    n_replicas: int
    replica: NDArray[np.int64]
    hit_tokens: NDArray[np.int64]
    prompt_tokens: NDArray[np.int64]

    @property
    def hit_rate(self) -> float:
        """Cached ÷ prompt tokens over all replicas (a fraction)."""
        return float(self.hit_tokens.sum() / self.prompt_tokens.sum())

    @property
    def requests_per_replica(self) -> NDArray[np.int64]:
        """Requests each replica served."""
        return np.bincount(self.replica, minlength=self.n_replicas)

    @property
    def computed_per_replica(self) -> NDArray[np.int64]:
        """Prompt tokens each replica prefilled (tokens)."""
        return np.bincount(self.replica, weights=self.prompt_tokens - self.hit_tokens,
                           minlength=self.n_replicas).astype(np.int64)

    @property
    def imbalance(self) -> float:
        """Busiest replica's requests ÷ the mean (1 = perfectly even)."""
        counts = self.requests_per_replica
        return float(counts.max() / counts.mean())


def route_requests(requests: BlockTrace | Sequence[Any], n_replicas: int, policy: str, *,
                   block_size: int = 16, capacity_blocks: int | None = None,
                   outputs: Sequence[Any] | None = None, sessions: ArrayLike | None = None,
                   load_bound: float | None = None, seed: int = 0) -> RoutingResult:
    """Route ``requests`` (token sequences or a ``BlockTrace``) across ``n_replicas`` replicas.

    ``capacity_blocks``: blocks of each replica's pool (``None``: unbounded); ``outputs`` as in
    ``kvlib.replay_prefix_cache``; ``sessions``: one id per request (needed by ``"session"``);
    ``load_bound``: c ≥ 1 for ``"prefix"`` (``None``: no bound); ``seed`` picks the session →
    replica hash.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
    r_count = positive_integer("n_replicas", n_replicas)
    reqs = list(block_level(requests, block_size, outputs))
    if load_bound is not None:
        if policy != "prefix":
            raise ValueError("load_bound applies to the 'prefix' policy")
        load_bound = number("load_bound", load_bound, minimum=1.0)
    home: NDArray[np.int64] | None = None
    if policy == "session":
        if sessions is None:
            raise ValueError("the 'session' policy needs sessions (one id per request)")
        ids = np.asarray(sessions)
        if ids.shape != (len(reqs),):
            raise ValueError(f"sessions must have one id per request ({len(reqs)})")
        _, codes = np.unique(ids, return_inverse=True)
        salt = np.random.default_rng(seed).integers(0, r_count, int(codes.max()) + 1)
        home = (codes + salt[codes]) % r_count  # each session fixed to one replica
    caches = [VllmBlockCache(capacity_blocks) for _ in range(r_count)]
    load = [0] * r_count
    replica, hits, prompts = [], [], []
    for i, (blocks, limit, alloc, n) in enumerate(reqs):
        if policy == "round_robin":
            r = i % r_count
        elif policy == "session":
            r = int(home[i])  # type: ignore[index]
        elif policy == "least_load":
            r = min(range(r_count), key=load.__getitem__)
        else:
            cap = None if load_bound is None else load_bound * (i + 1) / r_count
            best = None
            for j in range(r_count):
                if cap is not None and load[j] + 1 > cap:
                    continue
                key = (caches[j].match(blocks, limit), -load[j], -j)
                if best is None or key > best[0]:
                    best = (key, j)
            r = best[1] if best is not None else min(range(r_count), key=load.__getitem__)
        try:
            k = caches[r].serve(blocks, limit, alloc)
        except ValueError as exc:
            raise ValueError(f"request {i}: {exc}") from None
        load[r] += 1
        replica.append(r)
        hits.append(k * block_size)
        prompts.append(n)
    return RoutingResult(policy, r_count, np.asarray(replica, dtype=np.int64),
                         np.asarray(hits, dtype=np.int64), np.asarray(prompts, dtype=np.int64))
