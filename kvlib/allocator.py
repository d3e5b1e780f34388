"""KV-cache allocation policies and a continuous-batching simulator of their waste.

Policies (the baselines of the vLLM paper, Kwon et al., SOSP 2023, arXiv:2309.06180, §6.1):

- ``reserve_max``: a contiguous slot of ``max_model_len`` tokens per request
  (FasterTransformer, Orca (Max); 2048 tokens in the paper).
- ``reserve_pow2``: prompt + output rounded up to a power of two (Orca (Pow2): "over-reserves the
  space for outputs by at most 2×… if the true output length is 25, it reserves 32 positions for
  outputs"), capped at ``max_model_len`` when given.
- ``reserve_oracle``: exactly prompt + output (Orca (Oracle), knows the output length).
- ``paged``: fixed blocks of ``block_size`` tokens allocated on demand (vLLM's PagedAttention).

Reservations are placed in one contiguous address space of ``pool_tokens`` slots, so their
external fragmentation is modelled, not assumed: first-fit by default, or a binary buddy allocator
(``allocator="buddy"``), the one the paper assumes for Orca (§6.1: "We assume Orca uses the buddy
allocation algorithm to determine the memory address to store KV cache"), which also rounds every
reservation up to a power of two. Paged blocks are interchangeable: no external fragmentation, and
the only slack is the unfilled tail of each request's last block.

Scheduling model, one step = one forward pass of the engine:

1. every running request appends one token (paged: a new block when its length was a multiple
   of ``block_size``); if the pool runs out, the most recently admitted request is preempted
   (recompute: all its blocks are freed, it goes back to the front of the queue, and on
   re-admission its prompt plus the tokens it had generated are prefilled again; vLLM v1's rule);
2. if nobody was preempted, queued requests are admitted first-come-first-served while their
   prefill fits (head-of-line blocking: the queue stops at the first request that does not fit);
   admission prefills the whole prompt in that step;
3. the step is measured (requests admitted or finishing in it count);
4. requests that reached prompt + output tokens finish and free their memory for the next step.

A request therefore holds prompt, prompt+1, …, prompt+output tokens over output+1 steps.
"""
from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .checks import integer, positive_integer
from .workloads import as_requests, poisson_arrivals

POLICIES = ("reserve_max", "reserve_pow2", "reserve_oracle", "paged")
ALLOCATORS = ("first_fit", "buddy")  # placement of contiguous reservations
#: Largest block simulated (tokens): the paged loop keeps one counter per token of a block, so
#: its time and memory grow with the block; vLLM's largest (hybrid models) hold ~2,000 tokens.
MAX_BLOCK_SIZE = 2**16
#: Largest prompt or output simulated (tokens): sums of two stay exact in int64 arrays.
MAX_REQUEST_TOKENS = 2**52


class OutOfBlocksError(RuntimeError):
    """The paged pool has no free block left."""


class BlockAllocator:
    """A paged KV pool: ``num_blocks`` blocks of ``block_size`` tokens, a free list and block tables.

    ``block_tables[req]`` lists the physical block ids of request ``req`` in logical order;
    ``n_tokens[req]`` is how many tokens of state it holds.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1 token, got {block_size}")
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_list: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self.block_tables: dict[int, list[int]] = {}
        self.n_tokens: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        """Free blocks."""
        return len(self.free_list)

    @property
    def num_used(self) -> int:
        """Blocks held by requests."""
        return self.num_blocks - len(self.free_list)

    def blocks_for(self, n_tokens: int) -> int:
        """Blocks needed to hold ``n_tokens`` tokens."""
        return -(-n_tokens // self.block_size)

    def can_allocate(self, n_tokens: int) -> bool:
        """Whether a new request of ``n_tokens`` tokens fits in the free blocks now."""
        return self.blocks_for(n_tokens) <= self.num_free

    def allocate(self, req: int, n_tokens: int) -> list[int]:
        """Give new request ``req`` the blocks for its first ``n_tokens`` tokens (its prefill)."""
        if req in self.block_tables:
            raise ValueError(f"request {req} already holds blocks")
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        need = self.blocks_for(n_tokens)
        if need > self.num_free:
            raise OutOfBlocksError(f"request {req} needs {need} blocks, {self.num_free} free")
        table = [self.free_list.pop() for _ in range(need)]
        self.block_tables[req] = table
        self.n_tokens[req] = n_tokens
        return table

    def needs_block(self, req: int) -> bool:
        """Whether appending one token to ``req`` needs a new block (its last block is full)."""
        return self.n_tokens[req] % self.block_size == 0

    def append_token(self, req: int) -> None:
        """Append one token to ``req``, taking a block from the free list when its last one is full."""
        if self.needs_block(req):
            if not self.free_list:
                raise OutOfBlocksError(f"no free block for request {req}")
            self.block_tables[req].append(self.free_list.pop())
        self.n_tokens[req] += 1

    def free(self, req: int) -> int:
        """Return every block of ``req`` to the free list; the number of blocks returned."""
        table = self.block_tables.pop(req)
        del self.n_tokens[req]
        self.free_list.extend(reversed(table))
        return len(table)

    def slack(self, req: int) -> int:
        """Reserved but empty token slots of ``req``: the tail of its last block (tokens)."""
        return len(self.block_tables[req]) * self.block_size - self.n_tokens[req]


class ContiguousAllocator:
    """First-fit allocation of contiguous token ranges in a pool of ``pool_tokens`` slots.

    Free space is a sorted list of holes ``(start, size)``; freeing coalesces neighbours.
    """

    def __init__(self, pool_tokens: int) -> None:
        if pool_tokens < 1:
            raise ValueError(f"pool_tokens must be >= 1, got {pool_tokens}")
        self.pool_tokens = pool_tokens
        self.hole_starts: list[int] = [0]
        self.hole_sizes: list[int] = [pool_tokens]
        self.used_tokens = 0

    def allocate(self, n_tokens: int) -> int | None:
        """Start of the first hole that fits ``n_tokens`` (tokens), carved out; None if none fits."""
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        sizes = self.hole_sizes
        for i, size in enumerate(sizes):
            if size >= n_tokens:
                start = self.hole_starts[i]
                if size == n_tokens:
                    del self.hole_starts[i], sizes[i]
                else:
                    self.hole_starts[i] = start + n_tokens
                    sizes[i] = size - n_tokens
                self.used_tokens += n_tokens
                return start
        return None

    def free(self, start: int, n_tokens: int) -> None:
        """Return the range ``[start, start + n_tokens)``, merging it with adjacent holes."""
        starts, sizes = self.hole_starts, self.hole_sizes
        i = bisect.bisect_right(starts, start)
        end = start + n_tokens
        if start < 0 or end > self.pool_tokens or n_tokens < 1 \
                or (i > 0 and starts[i - 1] + sizes[i - 1] > start) or (i < len(starts) and starts[i] < end):
            raise ValueError(f"range [{start}, {end}) is not an allocated range of the pool")
        merge_prev = i > 0 and starts[i - 1] + sizes[i - 1] == start
        merge_next = i < len(starts) and starts[i] == end
        if merge_prev and merge_next:
            sizes[i - 1] += n_tokens + sizes[i]
            del starts[i], sizes[i]
        elif merge_prev:
            sizes[i - 1] += n_tokens
        elif merge_next:
            starts[i] = start
            sizes[i] += n_tokens
        else:
            starts.insert(i, start)
            sizes.insert(i, n_tokens)
        self.used_tokens -= n_tokens


class BuddyAllocator:
    """Binary buddy allocation of contiguous token ranges in a pool of ``pool_tokens`` slots.

    A request for n tokens gets a chunk of 2^ceil(log2 n) slots aligned to its size, split from the
    smallest free chunk that fits (lowest address first); a freed chunk merges with its buddy while
    both are free. A pool that is not a power of two is first carved into the largest aligned
    power-of-two chunks, e.g. 15,728 = 8,192 + 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16.
    """

    def __init__(self, pool_tokens: int) -> None:
        if pool_tokens < 1:
            raise ValueError(f"pool_tokens must be >= 1, got {pool_tokens}")
        pool_tokens = int(pool_tokens)
        self.pool_tokens = pool_tokens
        self.free_chunks: list[set[int]] = [set() for _ in range(pool_tokens.bit_length())]
        self.held: dict[int, int] = {}       # chunk start → order (chunk of 2**order slots)
        self._top: dict[int, int] = {}       # carved top-level chunks: start → order
        self.used_tokens = 0                 # tokens requested by the held chunks
        start = 0
        for order in range(pool_tokens.bit_length() - 1, -1, -1):
            if pool_tokens >> order & 1:
                self._top[start] = order
                self.free_chunks[order].add(start)
                start += 1 << order

    @staticmethod
    def chunk_tokens(n_tokens: int) -> int:
        """Slots of the chunk that holds ``n_tokens`` tokens: the next power of two."""
        return 1 << (n_tokens - 1).bit_length()

    @property
    def held_tokens(self) -> int:
        """Slots in held chunks, rounding included."""
        return sum(1 << order for order in self.held.values())

    def allocate(self, n_tokens: int) -> int | None:
        """Start of a chunk for ``n_tokens`` tokens, split off a free chunk; None if none is large enough."""
        if n_tokens < 1:
            raise ValueError(f"n_tokens must be >= 1, got {n_tokens}")
        want = (n_tokens - 1).bit_length()
        order = next((k for k in range(want, len(self.free_chunks)) if self.free_chunks[k]), None)
        if order is None:
            return None
        start = min(self.free_chunks[order])
        self.free_chunks[order].remove(start)
        while order > want:  # split: keep the lower half, free the upper buddy
            order -= 1
            self.free_chunks[order].add(start + (1 << order))
        self.held[start] = want
        self.used_tokens += n_tokens
        return start

    def free(self, start: int, n_tokens: int) -> None:
        """Return the chunk at ``start`` (allocated for ``n_tokens`` tokens), merging free buddies."""
        order = self.held.get(start)
        if order is None or self.chunk_tokens(n_tokens) != 1 << order:
            raise ValueError(f"no chunk of {n_tokens} tokens is allocated at {start}")
        del self.held[start]
        self.used_tokens -= n_tokens
        while self._top.get(start) != order:
            buddy = start ^ (1 << order)
            if buddy not in self.free_chunks[order]:
                break
            self.free_chunks[order].remove(buddy)
            start, order = min(start, buddy), order + 1
        self.free_chunks[order].add(start)


def reserved_tokens(prompt_tokens: int, output_tokens: int, policy: str,
                    max_model_len: int | None = None) -> int:
    """Contiguous slots a reservation policy sets aside for one request at admission (tokens)."""
    total = prompt_tokens + output_tokens
    if policy == "reserve_oracle":
        return total
    if policy == "reserve_pow2":
        pow2 = prompt_tokens + (1 << (output_tokens - 1).bit_length())
        return pow2 if max_model_len is None else min(pow2, max_model_len)
    if policy == "reserve_max":
        if max_model_len is None:
            raise ValueError("reserve_max needs max_model_len (tokens)")
        return max_model_len
    raise ValueError(f"{policy!r} is not a reservation policy; one of {POLICIES[:3]}")


def prefix_reuse_lost(prefix_tokens: int, block_size: int) -> int:
    """Tokens of a shared prefix (e.g. a system prompt) that a block-granular prefix cache cannot reuse.

    Prefix caches hash and share only full blocks, so the last ``prefix_tokens mod block_size``
    tokens are recomputed by every request (e.g. 1,000 tokens with 16-token blocks: 8 lost).
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1 token, got {block_size}")
    if prefix_tokens < 0:
        raise ValueError(f"prefix_tokens must be >= 0, got {prefix_tokens}")
    return prefix_tokens % block_size


@dataclass(frozen=True)
class SimResult:
    """What one simulated run measured. Token-steps: one token slot held for one step.

    With S(t) tokens of state, R(t) slots reserved by running requests and P = ``pool_tokens``,
    summed over the ``steps`` steps: ``token_utilization`` = ΣS/ΣR (the vLLM paper's "token
    states" share, of reserved memory), ``reservation_waste`` = slots reserved for tokens the
    request will still write / ΣR, ``internal_waste`` = slots it will never write / ΣR (the three
    sum to 1); ``pool_token_share`` = ΣS/(steps·P) and ``pool_reserved_share`` = ΣR/(steps·P),
    the rest of the pool being free or externally fragmented. With the buddy allocator,
    ``pool_rounding_share`` = Σ(chunk − reserved)/(steps·P) is the part of that rest lost to
    power-of-two rounding inside held chunks.
    """

    policy: str
    block_size: int            # tokens per block (paged); 1 for reservation policies
    pool_tokens: int           # KV pool size (tokens)
    requests: int              # requests submitted
    completed: int             # requests that finished
    rejected: int              # requests that can never fit the pool (never admitted)
    steps: int                 # engine steps from step 0 to the last completion
    preemptions: int           # recompute preemptions (paged only)
    recomputed_tokens: int     # tokens prefilled again after preemptions
    token_steps: int           # Σ_t running requests (request-steps simulated)
    token_utilization: float   # ΣS / ΣR, in [0, 1]
    reservation_waste: float   # Σ(reserved, to be written) / ΣR
    internal_waste: float      # Σ(reserved, never written) / ΣR
    pool_token_share: float    # ΣS / (steps · pool_tokens)
    pool_reserved_share: float  # ΣR / (steps · pool_tokens)
    peak_pool_token_share: float     # max_t S(t) / pool_tokens
    peak_pool_reserved_share: float  # max_t R(t) / pool_tokens
    max_slack_tokens: int      # max over requests and steps of reserved − held tokens
    mean_batch: float          # Σ_t running / steps
    max_batch: int             # most requests running in one step
    completed_per_step: float  # completed / steps (a throughput proxy)
    allocator: str = "first_fit"      # placement of contiguous reservations (ALLOCATORS)
    pool_rounding_share: float = 0.0  # Σ(buddy chunk − reserved) / (steps · pool_tokens)
    prefix_hit_tokens: int = 0        # with prefix_ids: prompt tokens served from the cache
    prefix_prompt_tokens: int = 0     # with prefix_ids: prompt tokens of the admitted requests
    prefix_prefill_tokens: int = 0    # with prefix_ids: tokens prefilled, recomputation included

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from the prefix cache ÷ prompt tokens (first admissions; 0
        without ``prefix_ids``)."""
        return self.prefix_hit_tokens / self.prefix_prompt_tokens if self.prefix_prompt_tokens else 0.0

    def pool_breakdown(self) -> dict[str, float]:
        """Shares of pool token-steps, summing to 1, as in the vLLM paper's Fig. 2.

        ``token_states``, ``reservation`` (reserved, written later), ``internal`` (reserved, never
        written) and ``free`` (unreserved: idle, externally fragmented or, with the buddy allocator,
        lost to power-of-two rounding — the paper's "External frag. & Others").
        """
        reserved = self.pool_reserved_share
        return {"token_states": self.pool_token_share,
                "reservation": self.reservation_waste * reserved,
                "internal": self.internal_waste * reserved,
                "free": 1.0 - reserved}


def _validate(requests: ArrayLike, pool_tokens: int, policy: str, block_size: int,
              max_model_len: int | None, max_batch: int | None,
              allocator: str = "first_fit") -> NDArray[np.int64]:
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)}")
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; one of {', '.join(ALLOCATORS)}")
    if policy == "paged" and allocator != "first_fit":
        raise ValueError("the allocator places contiguous reservations; paged blocks need none")
    for name, value in (("pool_tokens", pool_tokens), ("max_model_len", max_model_len),
                        ("max_batch", max_batch)):
        if value is not None:
            integer(name, value, minimum=None)
    positive_integer("block_size", block_size, maximum=MAX_BLOCK_SIZE)
    if pool_tokens < 1 or (policy == "paged" and pool_tokens < block_size):
        raise ValueError(f"pool_tokens ({pool_tokens}) is smaller than one block ({block_size} tokens)")
    if max_model_len is not None and max_model_len < 1:
        raise ValueError(f"max_model_len must be >= 1 token, got {max_model_len}")
    if policy == "reserve_max" and max_model_len is None:
        raise ValueError("reserve_max needs max_model_len (tokens)")
    if max_batch is not None and max_batch < 1:
        raise ValueError(f"max_batch must be >= 1 request, got {max_batch}")
    reqs = as_requests(requests)
    if (big := np.flatnonzero((reqs > MAX_REQUEST_TOKENS).any(axis=1))).size:
        raise ValueError(f"request {int(big[0])} has more than {MAX_REQUEST_TOKENS:,} prompt or "
                         "output tokens, the most simulate handles")
    total = reqs.sum(axis=1)
    for limit, what in ((max_model_len, "max_model_len"), (pool_tokens, "pool_tokens")):
        if limit is not None and (bad := np.flatnonzero(total > limit)).size:
            raise ValueError(f"request {int(bad[0])} needs {int(total[bad[0]])} tokens, "
                             f"more than {what} ({limit})")
    return reqs


def _arrivals(n: int, arrival_rate: float | None, arrival_steps: ArrayLike | None,
              seed: int) -> NDArray[np.int64]:
    if arrival_steps is not None:
        steps = np.asarray(arrival_steps)
        if steps.shape != (n,) or steps.dtype.kind not in "iu" or (steps < 0).any():
            raise ValueError(f"arrival_steps must be {n} integer steps >= 0")
        return steps.astype(np.int64)
    if arrival_rate is None:
        return np.zeros(n, dtype=np.int64)
    return poisson_arrivals(n, arrival_rate, seed)


def simulate(requests: ArrayLike, pool_tokens: int, policy: str = "paged", block_size: int = 16,
             max_model_len: int | None = None, seed: int = 0, arrival_rate: float | None = None,
             *, arrival_steps: ArrayLike | None = None, max_batch: int | None = None,
             allocator: str = "first_fit",
             prefix_ids: Sequence[Sequence[int]] | None = None) -> SimResult:
    """Serve ``requests`` ((n, 2) prompt and output tokens) from a KV pool of ``pool_tokens`` tokens.

    Arrivals: all at step 0 by default, Poisson at ``arrival_rate`` requests/step (seeded by
    ``seed``), or explicit ``arrival_steps``; served first-come-first-served (ties by row order).
    ``max_batch`` caps running requests (vLLM's max_num_seqs). ``allocator`` places reservations:
    ``"first_fit"`` or ``"buddy"`` (power-of-two chunks, as the paper assumes for Orca; a request
    whose chunk exceeds every carved chunk of the pool is rejected). A request longer than the pool or
    than ``max_model_len`` is a ValueError; one that fits in tokens but never in the policy's
    footprint (block rounding, power-of-two rounding, ``max_model_len`` > pool) is counted in
    ``rejected`` and skipped. The simulator jumps between events (completions, arrivals, the step
    a paged pool would overflow), tracking per-block-phase counts instead of per-token loops.

    ``prefix_ids`` (paged only) turns on vLLM-style prefix caching: one list per request of the
    chained block ids of its prompt's full blocks (⌊prompt / block_size⌋ ids, e.g. from
    ``kvlib.prefix.block_requests``). Admission looks up the longest cached run among the
    first ⌊(prompt − 1) / block_size⌋ blocks, shares those blocks with the requests holding
    them, and caches the rest of the prompt's full blocks; finished and preempted requests
    leave their prompt blocks cached but free, least recently freed evicted first, so cached
    blocks compete with running requests for the pool. Decode blocks are never cached. The
    result's ``prefix_hit_rate`` and ``prefix_prefill_tokens`` report the reuse; its token and
    reservation shares count a shared block once for every request that reads it.
    """
    reqs = _validate(requests, pool_tokens, policy, block_size, max_model_len, max_batch, allocator)
    n = len(reqs)
    ids = None if prefix_ids is None else _prefix_lists(prefix_ids, reqs, policy, block_size)
    arrival = _arrivals(n, arrival_rate, arrival_steps, seed)
    order = np.argsort(arrival, kind="stable")
    reqs, arrival = reqs[order], arrival[order]
    prompt, final = reqs[:, 0], reqs.sum(axis=1)
    if policy == "paged":
        num_blocks = pool_tokens // block_size
        fits = -(-final // block_size) <= num_blocks
        args = (prompt[fits].tolist(), final[fits].tolist(), arrival[fits].tolist())
        if ids is None:
            trace = _run_paged(*args, block_size, num_blocks, max_batch or n)
        else:
            kept = [ids[i] for i in order[fits].tolist()]
            trace = _run_paged_prefix(*args, kept, block_size, num_blocks, max_batch or n)
    else:
        footprint = np.array([reserved_tokens(int(p), int(f - p), policy, max_model_len)
                              for p, f in zip(prompt, final)], dtype=np.int64)
        buddy = allocator == "buddy"
        largest = 1 << (int(pool_tokens).bit_length() - 1) if buddy else pool_tokens  # biggest chunk
        fits = footprint <= largest
        trace = _run_contiguous(prompt[fits].tolist(), final[fits].tolist(), arrival[fits].tolist(),
                                footprint[fits].tolist(), pool_tokens, max_batch or n, buddy)
        block_size = 1
    return _result(trace, policy, block_size, pool_tokens, n, n - int(fits.sum()), allocator)


@dataclass(frozen=True)
class _Trace:
    """Raw output of an event loop: residency segments plus counters."""

    seg_start: NDArray[np.int64]   # tokens held in the first step of each residency
    seg_end: NDArray[np.int64]     # tokens held in its last step
    seg_final: NDArray[np.int64]   # the request's prompt + output (tokens)
    seg_footprint: NDArray[np.int64] | None  # reserved slots (contiguous policies)
    seg_chunk: NDArray[np.int64] | None      # slots of the allocator's chunk (buddy only)
    steps: int
    completed: int
    preemptions: int
    recomputed_tokens: int
    peak_tokens: int
    peak_reserved: int             # blocks (paged) or tokens (contiguous)
    max_batch: int
    hit_tokens: int = 0            # prefix caching: prompt tokens hit at first admission
    prompt_tokens: int = 0         # prefix caching: prompt tokens at first admission
    prefill_tokens: int = 0        # prefix caching: tokens prefilled over all admissions


def _growth(hist: list[int], period: int, first: int, k: int, running: int) -> int:
    """Σ_{τ=first}^{first+k-1} hist[τ mod period]: blocks newly needed over k steps."""
    q, r = divmod(k, period)
    total = q * running
    if r:
        a = first % period
        if a + r <= period:
            total += sum(hist[a:a + r])
        else:
            total += sum(hist[a:]) + sum(hist[:a + r - period])
    return total


def _run_paged(prompt: list[int], final: list[int], arrival: list[int], bs: int, nb: int,
               max_batch: int) -> _Trace:
    """Event loop for the paged policy.

    A running request admitted at step a with s0 tokens holds t + c tokens at step t (c = s0 − a),
    and needs a new block at step t iff t + c ≡ 1 (mod bs). ``hist[x]`` counts running requests
    with (1 − c) mod bs == x, so the blocks needed at step t are ``hist[t mod bs]``.
    """
    n_req = len(final)
    s0 = list(prompt)          # tokens at the current (re-)admission
    offset = [0] * n_req       # c
    gen = [0] * n_req          # bumped on preemption; stale heap entries carry an old gen
    running_flag = bytearray(n_req)
    hist = [0] * bs
    running = csum = used = 0
    ends: list[tuple[int, int, int]] = []      # (end step, request, gen)
    stack: list[tuple[int, int]] = []          # (request, gen) in admission order
    requeued: deque[int] = deque()
    pre_start: list[int] = []
    pre_end: list[int] = []
    pre_final: list[int] = []
    nxt = completed = preemptions = recomputed = 0
    peak_tokens = peak_used = max_running = 0
    t, freed = -1, False
    heappush, heappop = heapq.heappush, heapq.heappop
    while True:
        while ends and ends[0][2] != gen[ends[0][1]]:
            heappop(ends)
        e = ends[0][0] if ends else -1
        if requeued or (nxt < n_req and arrival[nxt] <= t):
            if freed:
                e = t + 1
        elif nxt < n_req and (e < 0 or arrival[nxt] < e):
            e = arrival[nxt]
        if e < 0:
            break
        preempt = False
        if running:
            free = nb - used
            k = e - t
            grow = hist[e % bs] if k == 1 else _growth(hist, bs, t + 1, k, running)
            if grow > free:                     # the pool overflows at step t + j <= e
                q = free // running
                j, grow = q * bs, q * running
                while grow <= free:
                    grow += hist[(t + 1 + j) % bs]
                    j += 1
                e, preempt = t + j, True
                before = used + grow - hist[e % bs]   # blocks held at step e − 1
                peak_used = max(peak_used, before)
                peak_tokens = max(peak_tokens, running * (e - 1) + csum)
            used += grow
        if preempt:
            while used > nb:
                r, g = stack.pop()
                if not running_flag[r] or gen[r] != g:
                    continue
                c = offset[r]
                used -= -(-(e + c) // bs)
                running -= 1
                csum -= c
                hist[(1 - c) % bs] -= 1
                held = e - 1 + c
                pre_start.append(s0[r])
                pre_end.append(held)
                pre_final.append(final[r])
                s0[r] = held
                gen[r] += 1
                running_flag[r] = 0
                requeued.appendleft(r)
                preemptions += 1
                recomputed += held
        else:
            while running < max_batch:
                if requeued:
                    r = requeued[0]
                elif nxt < n_req and arrival[nxt] <= e:
                    r = nxt
                else:
                    break
                need = -(-s0[r] // bs)
                if need > nb - used:
                    break
                if requeued:
                    requeued.popleft()
                else:
                    nxt += 1
                used += need
                c = s0[r] - e
                offset[r] = c
                running += 1
                csum += c
                hist[(1 - c) % bs] += 1
                running_flag[r] = 1
                heappush(ends, (e + final[r] - s0[r], r, gen[r]))
                stack.append((r, gen[r]))
        peak_used = max(peak_used, used)
        peak_tokens = max(peak_tokens, running * e + csum)
        max_running = max(max_running, running)
        freed = preempt  # memory came back: try admitting at the next step
        while ends and ends[0][0] == e:
            _, r, g = heappop(ends)
            if g != gen[r]:
                continue
            c = offset[r]
            used -= -(-final[r] // bs)
            running -= 1
            csum -= c
            hist[(1 - c) % bs] -= 1
            running_flag[r] = 0
            completed += 1
            freed = True
        t = e
    arr = np.asarray
    return _Trace(arr(s0 + pre_start, dtype=np.int64), arr(final + pre_end, dtype=np.int64),
                  arr(final + pre_final, dtype=np.int64), None, None, t + 1, completed, preemptions,
                  recomputed, peak_tokens, peak_used, max_running)


def _prefix_lists(prefix_ids: Sequence[Sequence[int]], reqs: NDArray[np.int64], policy: str,
                  block_size: int) -> list[list[int]]:
    """``prefix_ids`` checked against the requests: one id list of ⌊prompt / block_size⌋ ints each."""
    if policy != "paged":
        raise ValueError("prefix_ids need the paged policy (blocks are what a prefix cache shares)")
    if len(prefix_ids) != len(reqs):
        raise ValueError(f"prefix_ids has {len(prefix_ids)} entries for {len(reqs)} requests")
    out = []
    for i, (ids, p) in enumerate(zip(prefix_ids, reqs[:, 0].tolist())):
        ids = [int(x) for x in ids]
        if len(ids) != p // block_size:
            raise ValueError(f"request {i}: {len(ids)} prefix ids for {p} prompt tokens; need "
                             f"{p // block_size} (one per full {block_size}-token block)")
        out.append(ids)
    return out


def _run_paged_prefix(prompt: list[int], final: list[int], arrival: list[int], ids: list[list[int]],
                      bs: int, nb: int, max_batch: int) -> _Trace:
    """``_run_paged`` with vLLM-style prefix caching (see ``simulate``).

    Blocks are counted, not named: ``refs`` holds the ids of cached blocks that running requests
    read (with their reader counts), ``lru`` the ids of cached blocks no request holds (oldest
    first), ``private`` the blocks running requests hold without an id (their last prompt block
    and their decode blocks). Free blocks without an id number nb − private − |refs| − |lru|;
    they are handed out before any cached block is evicted.
    """
    n_req = len(final)
    s0 = list(prompt)
    offset = [0] * n_req
    gen = [0] * n_req
    shared: list[list[int]] = [[] for _ in range(n_req)]  # cached ids a running request reads
    admitted = bytearray(n_req)
    running_flag = bytearray(n_req)
    hist = [0] * bs
    refs: dict[int, int] = {}
    lru: OrderedDict[int, None] = OrderedDict()
    running = csum = private = 0
    ends: list[tuple[int, int, int]] = []
    stack: list[tuple[int, int]] = []
    requeued: deque[int] = deque()
    pre_start: list[int] = []
    pre_end: list[int] = []
    pre_final: list[int] = []
    nxt = completed = preemptions = recomputed = 0
    hit_tokens = prompt_tokens = prefill_tokens = 0
    peak_tokens = peak_used = max_running = 0
    t, freed = -1, False
    heappush, heappop = heapq.heappush, heapq.heappop

    def evict_to_fit() -> None:
        """Evict least recently freed cached blocks until the free ones without an id cover
        what the running requests hold."""
        for _ in range(private + len(refs) + len(lru) - nb):
            lru.popitem(last=False)

    def release(r: int, blocks: int) -> None:
        """Free request ``r``, which holds ``blocks`` blocks: cached ones tail first."""
        nonlocal private
        private -= blocks - len(shared[r])
        for h in reversed(shared[r]):
            if refs[h] == 1:
                del refs[h]
                lru[h] = None
            else:
                refs[h] -= 1
        shared[r] = []

    while True:
        while ends and ends[0][2] != gen[ends[0][1]]:
            heappop(ends)
        e = ends[0][0] if ends else -1
        if requeued or (nxt < n_req and arrival[nxt] <= t):
            if freed:
                e = t + 1
        elif nxt < n_req and (e < 0 or arrival[nxt] < e):
            e = arrival[nxt]
        if e < 0:
            break
        preempt = False
        if running:
            free = nb - private - len(refs)
            k = e - t
            grow = hist[e % bs] if k == 1 else _growth(hist, bs, t + 1, k, running)
            if grow > free:                     # the pool overflows at step t + j <= e
                q = free // running
                j, grow = q * bs, q * running
                while grow <= free:
                    grow += hist[(t + 1 + j) % bs]
                    j += 1
                e, preempt = t + j, True
                grow -= hist[e % bs]            # growth up to step e − 1 fits
                peak_used = max(peak_used, private + len(refs) + grow)
                peak_tokens = max(peak_tokens, running * (e - 1) + csum)
            private += grow
            evict_to_fit()
        if preempt:
            # Step e request by request, oldest first, as vLLM's scheduler does: a request that
            # needs a block when none is free preempts the newest running request (perhaps
            # itself), whose freed blocks the next requests take.
            stack[:] = [(r, g) for r, g in stack if running_flag[r] and gen[r] == g]
            for r, _ in list(stack):
                if (e + offset[r]) % bs != 1 % bs:
                    continue
                while nb - private - len(refs) == 0 and running_flag[r]:
                    v, gv = stack.pop()
                    if not running_flag[v] or gen[v] != gv:
                        continue
                    c = offset[v]
                    held = e - 1 + c
                    release(v, -(-held // bs))
                    running -= 1
                    csum -= c
                    hist[(1 - c) % bs] -= 1
                    pre_start.append(s0[v])
                    pre_end.append(held)
                    pre_final.append(final[v])
                    s0[v] = held
                    gen[v] += 1
                    running_flag[v] = 0
                    requeued.appendleft(v)
                    preemptions += 1
                    recomputed += held
                if running_flag[r]:
                    private += 1
                    evict_to_fit()
        else:
            while running < max_batch:
                if requeued:
                    r = requeued[0]
                elif nxt < n_req and arrival[nxt] <= e:
                    r = nxt
                else:
                    break
                mine = ids[r]
                limit = min((s0[r] - 1) // bs, len(mine))
                hit = 0
                while hit < limit and (mine[hit] in refs or mine[hit] in lru):
                    hit += 1
                idle = sum(1 for h in mine[:hit] if h in lru)
                need = -(-s0[r] // bs) - hit
                if need + idle > nb - private - len(refs):
                    break
                if requeued:
                    requeued.popleft()
                else:
                    nxt += 1
                for h in mine[:hit]:            # touch the hit blocks
                    if h in lru:
                        del lru[h]
                        refs[h] = 1
                    else:
                        refs[h] += 1
                private += need
                evict_to_fit()                  # new blocks: free ones first, then evict
                held = mine[:hit]
                for h in mine[hit:]:            # cache the prompt's other full blocks
                    if h not in refs and h not in lru:
                        refs[h] = 1
                        held.append(h)
                        private -= 1
                shared[r] = held
                if not admitted[r]:
                    admitted[r] = 1
                    hit_tokens += hit * bs
                    prompt_tokens += s0[r]
                prefill_tokens += s0[r] - hit * bs
                c = s0[r] - e
                offset[r] = c
                running += 1
                csum += c
                hist[(1 - c) % bs] += 1
                running_flag[r] = 1
                heappush(ends, (e + final[r] - s0[r], r, gen[r]))
                stack.append((r, gen[r]))
        used = private + len(refs)
        peak_used = max(peak_used, used)
        peak_tokens = max(peak_tokens, running * e + csum)
        max_running = max(max_running, running)
        freed = preempt
        while ends and ends[0][0] == e:
            _, r, g = heappop(ends)
            if g != gen[r]:
                continue
            c = offset[r]
            release(r, -(-final[r] // bs))
            running -= 1
            csum -= c
            hist[(1 - c) % bs] -= 1
            running_flag[r] = 0
            completed += 1
            freed = True
        t = e
    arr = np.asarray
    return _Trace(arr(s0 + pre_start, dtype=np.int64), arr(final + pre_end, dtype=np.int64),
                  arr(final + pre_final, dtype=np.int64), None, None, t + 1, completed, preemptions,
                  recomputed, peak_tokens, peak_used, max_running, hit_tokens, prompt_tokens,
                  prefill_tokens)


def _run_contiguous(prompt: list[int], final: list[int], arrival: list[int], footprint: list[int],
                    pool_tokens: int, max_batch: int, buddy: bool = False) -> _Trace:
    """Event loop for the reservation policies: first-fit or buddy regions, no growth, no preemption."""
    n_req = len(final)
    pool = BuddyAllocator(pool_tokens) if buddy else ContiguousAllocator(pool_tokens)
    start = [0] * n_req
    ends: list[tuple[int, int]] = []
    running = csum = used = nxt = completed = 0
    peak_tokens = peak_used = max_running = 0
    t, freed = -1, False
    while True:
        e = ends[0][0] if ends else -1
        if nxt < n_req and arrival[nxt] <= t:
            if freed:
                e = t + 1
        elif nxt < n_req and (e < 0 or arrival[nxt] < e):
            e = arrival[nxt]
        if e < 0:
            break
        while running < max_batch and nxt < n_req and arrival[nxt] <= e:
            at = pool.allocate(footprint[nxt])
            if at is None:
                break
            start[nxt] = at
            used += footprint[nxt]
            running += 1
            csum += prompt[nxt] - e
            heapq.heappush(ends, (e + final[nxt] - prompt[nxt], nxt))
            nxt += 1
        peak_used = max(peak_used, used)
        peak_tokens = max(peak_tokens, running * e + csum)
        max_running = max(max_running, running)
        freed = False
        while ends and ends[0][0] == e:
            _, r = heapq.heappop(ends)
            pool.free(start[r], footprint[r])
            used -= footprint[r]
            running -= 1
            csum -= final[r] - e
            completed += 1
            freed = True
        t = e
    arr = np.asarray
    chunk = arr([BuddyAllocator.chunk_tokens(f) for f in footprint], dtype=np.int64) if buddy else None
    return _Trace(arr(prompt, dtype=np.int64), arr(final, dtype=np.int64), arr(final, dtype=np.int64),
                  arr(footprint, dtype=np.int64), chunk, t + 1, completed, 0, 0, peak_tokens, peak_used,
                  max_running)


def _block_sum(n: NDArray[np.int64], bs: int) -> NDArray[np.int64]:
    """Σ_{s=1}^{n} ceil(s / bs), elementwise (blocks·steps)."""
    q, r = n // bs, n % bs
    return bs * q * (q + 1) // 2 + r * (q + 1)


def _result(trace: _Trace, policy: str, bs: int, pool_tokens: int, n: int, rejected: int,
            allocator: str = "first_fit") -> SimResult:
    a, b, f = trace.seg_start, trace.seg_end, trace.seg_final
    if f.size and int(f.max()) ** 2 * f.size >= 2**62:  # token-step sums would overflow int64
        a, b, f = (x.astype(object) for x in (a, b, f))
    length = b - a + 1
    tokens = int(((a + b) * length // 2).sum())
    if trace.seg_footprint is None:
        reserved_steps = bs * (_block_sum(b, bs) - _block_sum(a - 1, bs))
        last = -(-f // bs) * bs
        internal_steps = (last - f) * np.maximum(0, b - np.maximum(a, last - bs + 1) + 1)
        first_block_start = a + (1 - a) % bs
        slack = np.where(first_block_start <= b, bs - 1, -(-a // bs) * bs - a)
        peak_reserved = trace.peak_reserved * bs
    else:
        reserved_steps = trace.seg_footprint * length
        internal_steps = (trace.seg_footprint - f) * length
        slack = trace.seg_footprint - a
        peak_reserved = trace.peak_reserved
    reserved = int(reserved_steps.sum())
    internal = int(internal_steps.sum())
    rounding = 0 if trace.seg_chunk is None else int(((trace.seg_chunk - trace.seg_footprint) * length).sum())
    steps = trace.steps
    pool_steps = steps * pool_tokens
    return SimResult(
        policy=policy, block_size=bs, pool_tokens=pool_tokens, requests=n,
        completed=trace.completed, rejected=rejected, steps=steps, preemptions=trace.preemptions,
        recomputed_tokens=trace.recomputed_tokens, token_steps=int(length.sum()),
        token_utilization=tokens / reserved if reserved else 0.0,
        reservation_waste=(reserved - tokens - internal) / reserved if reserved else 0.0,
        internal_waste=internal / reserved if reserved else 0.0,
        pool_token_share=tokens / pool_steps if steps else 0.0,
        pool_reserved_share=reserved / pool_steps if steps else 0.0,
        peak_pool_token_share=trace.peak_tokens / pool_tokens,
        peak_pool_reserved_share=peak_reserved / pool_tokens,
        max_slack_tokens=int(slack.max()) if slack.size else 0,
        mean_batch=int(length.sum()) / steps if steps else 0.0,
        max_batch=trace.max_batch,
        completed_per_step=trace.completed / steps if steps else 0.0,
        allocator=allocator,
        pool_rounding_share=rounding / pool_steps if steps else 0.0,
        prefix_hit_tokens=trace.hit_tokens, prefix_prompt_tokens=trace.prompt_tokens,
        prefix_prefill_tokens=trace.prefill_tokens,
    )
