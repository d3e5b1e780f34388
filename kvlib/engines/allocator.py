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

``simulate`` jumps from event to event (``_run_paged``, ``_run_contiguous``);
``kvlib.allocator_reference.simulate_reference`` walks the same rules one step at a time with
real block tables, and the tests hold the two equal field by field.
"""
from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.checks import integer, positive_integer
from .workloads import MAX_ARRIVAL_STEP, as_requests, poisson_arrivals

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
        block_size = positive_integer("block_size", block_size)
        num_blocks = positive_integer("num_blocks", num_blocks)
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
        n_tokens = positive_integer("n_tokens", n_tokens)
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
        pool_tokens = positive_integer("pool_tokens", pool_tokens)
        self.pool_tokens = pool_tokens
        self.hole_starts: list[int] = [0]
        self.hole_sizes: list[int] = [pool_tokens]
        self.used_tokens = 0

    def allocate(self, n_tokens: int) -> int | None:
        """Start of the first hole that fits ``n_tokens`` (tokens), carved out; None if none fits."""
        n_tokens = positive_integer("n_tokens", n_tokens)
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
        pool_tokens = positive_integer("pool_tokens", pool_tokens)
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
        n_tokens = positive_integer("n_tokens", n_tokens)
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
        if steps.shape != (n,) or steps.dtype.kind not in "iu" or (steps < 0).any() \
                or (steps > MAX_ARRIVAL_STEP).any():
            raise ValueError(f"arrival_steps must be {n} integer steps from 0 to "
                             f"{MAX_ARRIVAL_STEP:,}")
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
    ``kvlib.engines.prefix.block_requests``). Admission looks up the longest cached run among the
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
        pool = (_PagedPool(num_blocks, block_size) if ids is None else
                _PrefixCachingPool(num_blocks, block_size, [ids[i] for i in order[fits].tolist()]))
        trace = _run_paged(prompt[fits].tolist(), final[fits].tolist(), arrival[fits].tolist(), pool,
                           max_batch or n)
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


def _growth(needs_block_at: list[int], block_size: int, first_step: int, n_steps: int,
            n_running: int) -> int:
    """New blocks the running requests take over steps ``first_step … first_step + n_steps − 1``:
    Σ needs_block_at[step mod block_size]. Every ``block_size`` consecutive steps each running
    request takes exactly one, so whole periods count ``n_running`` each."""
    periods, rest = divmod(n_steps, block_size)
    blocks = periods * n_running
    if rest:
        start = first_step % block_size
        if start + rest <= block_size:
            blocks += sum(needs_block_at[start:start + rest])
        else:
            blocks += sum(needs_block_at[start:]) + sum(needs_block_at[:start + rest - block_size])
    return blocks


class _PagedPool:
    """The paged event loop's KV pool: ``num_blocks`` interchangeable blocks of ``block_size``
    tokens, only counted (``BlockAllocator`` names them, in the step-by-step reference).

    The loop asks it three things: ``admit`` (the blocks of a prefill, if they fit), ``grow``
    (new blocks for running requests, checked free by the loop) and ``release`` (a finished or
    preempted request's blocks).
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free_blocks = num_blocks  # blocks no running request holds

    def admit(self, request: int, tokens: int) -> bool:
        """Take the blocks for ``request``'s ``tokens``-token prefill; False (and take nothing)
        if they do not fit."""
        blocks = -(-tokens // self.block_size)
        if blocks > self.free_blocks:
            return False
        self.free_blocks -= blocks
        return True

    def grow(self, blocks: int) -> None:
        """Running requests take ``blocks`` new blocks (the loop has checked they are free)."""
        self.free_blocks -= blocks

    def release(self, request: int, tokens: int) -> None:
        """``request``, holding ``tokens`` tokens, finishes or is preempted: its blocks are free."""
        self.free_blocks += -(-tokens // self.block_size)

    def prefix_counts(self) -> tuple[int, int, int]:
        """(prompt tokens hit at first admissions, prompt tokens at first admissions, tokens
        prefilled over all admissions): no prefix cache, no counts."""
        return 0, 0, 0


class _PrefixCachingPool(_PagedPool):
    """A paged pool with vLLM-style prefix caching (``simulate(prefix_ids=...)``).

    Blocks are counted, not named. ``readers`` maps the id of each cached block that running
    requests read to the number of readers; ``idle`` holds the ids of cached blocks no request
    reads, least recently freed first: free, but kept until evicted. ``free_blocks`` counts the
    blocks no running request holds, idle ones included; running requests hold the others, cached
    or not (a prompt's partial last block, decode blocks, a block whose content another block
    already caches). The ``free_blocks − |idle|`` free blocks without an id are handed out before
    any idle block is evicted.
    """

    def __init__(self, num_blocks: int, block_size: int, prefix_ids: list[list[int]]) -> None:
        super().__init__(num_blocks, block_size)
        self.prefix_ids = prefix_ids                  # per request: ids of its full prompt blocks
        self.readers: dict[int, int] = {}
        self.idle: OrderedDict[int, None] = OrderedDict()
        self.cached_ids: dict[int, list[int]] = {}    # running request → cached ids it reads
        self.seen = bytearray(len(prefix_ids))        # admitted at least once
        self.hit_tokens = self.prompt_tokens = self.prefilled_tokens = 0

    def admit(self, request: int, tokens: int) -> bool:
        """Share the longest cached run of ``request``'s first ⌊(tokens − 1) / block_size⌋ blocks
        (a hit never covers the last prompt token), take new blocks for the rest and cache its
        other full prompt blocks; False (and change nothing) if the new blocks do not fit."""
        ids, readers, idle, block_size = self.prefix_ids[request], self.readers, self.idle, self.block_size
        lookup = min((tokens - 1) // block_size, len(ids))
        hit = 0
        while hit < lookup and (ids[hit] in readers or ids[hit] in idle):
            hit += 1
        revived = sum(1 for h in ids[:hit] if h in idle)  # idle hits stop being free
        new_blocks = -(-tokens // block_size) - hit
        if new_blocks + revived > self.free_blocks:
            return False
        for h in ids[:hit]:
            if h in idle:
                del idle[h]
                readers[h] = 1
                self.free_blocks -= 1
            else:
                readers[h] += 1
        self.grow(new_blocks)                  # free blocks first, then evict idle ones
        cached = ids[:hit]
        for h in ids[hit:]:                    # cache the prompt's other full blocks
            if h not in readers and h not in idle:
                readers[h] = 1
                cached.append(h)
        self.cached_ids[request] = cached
        if not self.seen[request]:
            self.seen[request] = 1
            self.hit_tokens += hit * block_size
            self.prompt_tokens += tokens
        self.prefilled_tokens += tokens - hit * block_size
        return True

    def grow(self, blocks: int) -> None:
        """Running requests take ``blocks`` new blocks: free ones first, then evict the least
        recently freed idle blocks."""
        self.free_blocks -= blocks
        idle = self.idle
        for _ in range(len(idle) - self.free_blocks):
            idle.popitem(last=False)

    def release(self, request: int, tokens: int) -> None:
        """Free ``request`` (holding ``tokens`` tokens): its uncached blocks are free, its cached
        blocks idle once no other request reads them, tail first."""
        cached = self.cached_ids.pop(request)
        self.free_blocks += -(-tokens // self.block_size) - len(cached)
        readers = self.readers
        for h in reversed(cached):
            if readers[h] == 1:
                del readers[h]
                self.idle[h] = None
                self.free_blocks += 1
            else:
                readers[h] -= 1

    def prefix_counts(self) -> tuple[int, int, int]:
        """(prompt tokens hit at first admissions, prompt tokens at first admissions, tokens
        prefilled over all admissions)."""
        return self.hit_tokens, self.prompt_tokens, self.prefilled_tokens


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


def _run_paged(prompt: list[int], final: list[int], arrival: list[int], pool: _PagedPool,
               max_batch: int) -> _Trace:
    """The paged policy's continuous-batching event loop (the rules in the module docstring).

    Requests come sorted by arrival step; ``pool`` prices admission, growth and release in
    blocks (``_PagedPool``, or ``_PrefixCachingPool`` with prefix caching). The loop jumps from
    event to event — a completion, an arrival, the step after memory came back while requests
    wait, the step the pool overflows — because between events only growth happens, and growth
    is periodic: a request admitted at step a with p tokens holds step + token_offset tokens at
    each later step (token_offset = p − a) and takes a new block at the steps where it holds
    1 (mod block_size) tokens. ``needs_block_at[x]`` counts the running requests that take one
    at steps ≡ x (mod block_size), so the blocks taken over a jump are a sum over it.
    """
    block_size, num_blocks = pool.block_size, pool.num_blocks
    admit, grow, release = pool.admit, pool.grow, pool.release
    n_requests = len(final)
    prefill_tokens = list(prompt)      # tokens prefilled at the current admission: the prompt,
                                       # plus the tokens generated before a preemption
    token_offset = [0] * n_requests    # a running request holds step + token_offset tokens
    generation = [0] * n_requests      # bumped on preemption: older heap entries are stale
    is_running = bytearray(n_requests)
    needs_block_at = [0] * block_size  # running requests taking a block at steps ≡ index; one
                                       # with token_offset c takes them at steps ≡ 1 − c
    n_running = offset_sum = 0         # running requests hold n_running · step + offset_sum tokens
    finishes: list[tuple[int, int, int]] = []    # heap of (finish step, request, generation)
    admission_order: list[tuple[int, int]] = []  # (request, generation), newest last
    preempted: deque[int] = deque()    # preempted requests: the head of the queue, newest first
    next_new = 0                       # first request never admitted (the rest arrive later)
    cut_start: list[int] = []          # residencies cut by preemption: tokens at admission,
    cut_end: list[int] = []            # tokens at their last step,
    cut_final: list[int] = []          # the request's prompt + output
    completed = preemptions = recomputed_tokens = 0
    peak_tokens = peak_blocks = max_running = 0
    step, memory_freed = -1, False     # the last step simulated; whether it freed memory
    heappush, heappop = heapq.heappush, heapq.heappop
    while True:
        # The next event: the earliest completion, or the next step if requests wait and memory
        # came back, or the next arrival if none wait.
        while finishes and finishes[0][2] != generation[finishes[0][1]]:
            heappop(finishes)
        next_step = finishes[0][0] if finishes else -1
        if preempted or (next_new < n_requests and arrival[next_new] <= step):
            if memory_freed:
                next_step = step + 1
        elif next_new < n_requests and (next_step < 0 or arrival[next_new] < next_step):
            next_step = arrival[next_new]
        if next_step < 0:
            break

        # 1. Growth: each running request appends one token per step up to next_step. If the
        # pool overflows first, stop at the step it does: whole periods of block_size steps
        # (one block per request each), then step by step; the steps before it fit.
        overflow = False
        if n_running:
            free_blocks = pool.free_blocks
            new_blocks = (needs_block_at[next_step % block_size] if next_step - step == 1 else
                          _growth(needs_block_at, block_size, step + 1, next_step - step, n_running))
            if new_blocks > free_blocks:
                periods = free_blocks // n_running
                steps_ahead, new_blocks = periods * block_size, periods * n_running
                while new_blocks <= free_blocks:
                    new_blocks += needs_block_at[(step + 1 + steps_ahead) % block_size]
                    steps_ahead += 1
                next_step, overflow = step + steps_ahead, True
                new_blocks -= needs_block_at[next_step % block_size]
                peak_blocks = max(peak_blocks, num_blocks - free_blocks + new_blocks)  # at next_step − 1
                peak_tokens = max(peak_tokens, n_running * (next_step - 1) + offset_sum)
            grow(new_blocks)

        if overflow:
            # 2a. Preemption: the requests that need a block take one, oldest first; when none
            # is free, the newest running request (perhaps the one asking) is preempted, as
            # vLLM's scheduler does: its blocks are freed and it goes back to the head of the
            # queue, to prefill everything it held again. Nobody is admitted in this step.
            waiting_blocks = needs_block_at[next_step % block_size]
            free_blocks = pool.free_blocks
            while waiting_blocks > free_blocks:
                grow(free_blocks)                     # the oldest waiting take the free blocks
                waiting_blocks -= free_blocks
                victim, victim_generation = admission_order.pop()
                while not is_running[victim] or generation[victim] != victim_generation:
                    victim, victim_generation = admission_order.pop()  # finished or preempted before
                offset = token_offset[victim]
                held = next_step - 1 + offset         # it does not grow in this step
                if held % block_size == 0:
                    waiting_blocks -= 1               # it was waiting for a block
                release(victim, held)
                n_running -= 1
                offset_sum -= offset
                needs_block_at[(1 - offset) % block_size] -= 1
                is_running[victim] = 0
                cut_start.append(prefill_tokens[victim])
                cut_end.append(held)
                cut_final.append(final[victim])
                prefill_tokens[victim] = held
                generation[victim] += 1
                preempted.appendleft(victim)
                preemptions += 1
                recomputed_tokens += held
                free_blocks = pool.free_blocks
            grow(waiting_blocks)
        else:
            # 2b. Admission, first come first served (preempted requests first, then arrivals
            # up to next_step) while the prefill fits: the queue stops at the first that does not.
            while n_running < max_batch:
                if preempted:
                    request = preempted[0]
                elif next_new < n_requests and arrival[next_new] <= next_step:
                    request = next_new
                else:
                    break
                tokens = prefill_tokens[request]
                if not admit(request, tokens):
                    break
                if preempted:
                    preempted.popleft()
                else:
                    next_new += 1
                offset = tokens - next_step
                token_offset[request] = offset
                n_running += 1
                offset_sum += offset
                needs_block_at[(1 - offset) % block_size] += 1
                is_running[request] = 1
                heappush(finishes, (next_step + final[request] - tokens, request, generation[request]))
                admission_order.append((request, generation[request]))

        # 3. Measure the step (requests admitted or finishing in it count).
        used_blocks = num_blocks - pool.free_blocks
        held_tokens = n_running * next_step + offset_sum
        if used_blocks > peak_blocks:
            peak_blocks = used_blocks
        if held_tokens > peak_tokens:
            peak_tokens = held_tokens
        if n_running > max_running:
            max_running = n_running

        # 4. Requests that reached prompt + output tokens finish and free their blocks.
        memory_freed = overflow
        while finishes and finishes[0][0] == next_step:
            _, request, request_generation = heappop(finishes)
            if request_generation != generation[request]:
                continue
            offset = token_offset[request]
            release(request, final[request])
            n_running -= 1
            offset_sum -= offset
            needs_block_at[(1 - offset) % block_size] -= 1
            is_running[request] = 0
            completed += 1
            memory_freed = True
        step = next_step
    arr = np.asarray
    return _Trace(arr(prefill_tokens + cut_start, dtype=np.int64), arr(final + cut_end, dtype=np.int64),
                  arr(final + cut_final, dtype=np.int64), None, None, step + 1, completed, preemptions,
                  recomputed_tokens, peak_tokens, peak_blocks, max_running, *pool.prefix_counts())


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
