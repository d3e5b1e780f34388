"""The step-by-step reference for ``kvlib.simulate``: every engine step, real block tables.

``simulate`` jumps from event to event and integrates what happens in between in closed form.
This module does the obvious thing instead: it walks every step with the allocators themselves
(``BlockAllocator``; the same with vLLM's prefix cache; first-fit or buddy reservations) and sums
what each step holds. It follows the same scheduling rules (see ``kvlib.engines.allocator``): running
requests grow, oldest first, preempting the newest when no block is free; otherwise the queue is
admitted first come first served; the step is measured; requests at their final length finish.
It is slow (steps × running requests) and meant to be read; the tests check ``simulate``
against it field by field.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .allocator import (
    ALLOCATORS,
    BlockAllocator,
    BuddyAllocator,
    ContiguousAllocator,
    OutOfBlocksError,
    SimResult,
    reserved_tokens,
)
from ..core.checks import positive_integer
from .workloads import as_requests


class _PrefixCachedBlocks:
    """``BlockAllocator``'s interface with vLLM's prefix cache: ``num_blocks`` named blocks of
    ``block_size`` tokens; full prompt blocks carry their content id (``prefix_ids[req]``, one per
    full prompt block), requests with the same leading ids share those blocks, and a freed block
    with an id stays cached until a new block is needed.

    vLLM's free queue: blocks without an id first (``free_list``), then cached ones (``cached``),
    least recently freed first, so a cached block is evicted only when no other block is free.
    """

    def __init__(self, num_blocks: int, block_size: int, prefix_ids: list[list[int]]) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_ids = prefix_ids
        self.free_list: list[int] = list(range(num_blocks - 1, -1, -1))
        self.cached: OrderedDict[int, None] = OrderedDict()  # free blocks that keep their id
        self.readers = [0] * num_blocks                 # requests holding each block
        self.content: dict[int, int] = {}               # block → id of what it holds
        self.block_of: dict[int, int] = {}              # id → the block that holds it
        self.block_tables: dict[int, list[int]] = {}
        self.n_tokens: dict[int, int] = {}
        self.seen: set[int] = set()                     # requests admitted before
        self.hit_tokens = self.prompt_tokens = self.prefilled_tokens = 0

    @property
    def num_free(self) -> int:
        """Free blocks, cached ones included."""
        return len(self.free_list) + len(self.cached)

    @property
    def num_used(self) -> int:
        """Blocks held by requests, a shared block once."""
        return self.num_blocks - self.num_free

    def needs_block(self, req: int) -> bool:
        return self.n_tokens[req] % self.block_size == 0

    def slack(self, req: int) -> int:
        return len(self.block_tables[req]) * self.block_size - self.n_tokens[req]

    def _take(self) -> int:
        """A free block for one reader: one without an id if any, else the least recently freed
        cached one, whose id is forgotten."""
        if self.free_list:
            block = self.free_list.pop()
        else:
            block, _ = self.cached.popitem(last=False)
            del self.block_of[self.content.pop(block)]
        self.readers[block] = 1
        return block

    def allocate(self, req: int, n_tokens: int) -> None:
        """Admit ``req`` with ``n_tokens`` tokens: share the cached blocks of its longest cached
        run of ids among the first ⌊(n_tokens − 1) / block_size⌋ (a hit never covers the last
        token), take new blocks for the rest and cache its other full prompt blocks."""
        ids, block_size = self.prefix_ids[req], self.block_size
        hits = []
        for h in ids[:(n_tokens - 1) // block_size]:
            if h not in self.block_of:
                break
            hits.append(self.block_of[h])
        new = -(-n_tokens // block_size) - len(hits)
        idle_hits = sum(1 for b in hits if self.readers[b] == 0)  # cached hits stop being free
        if new + idle_hits > self.num_free:
            raise OutOfBlocksError(f"request {req} needs {new + idle_hits} blocks, {self.num_free} free")
        for b in hits:
            if self.readers[b] == 0:
                del self.cached[b]
            self.readers[b] += 1
        table = hits + [self._take() for _ in range(new)]
        for b, h in zip(table[len(hits):], ids[len(hits):]):
            if h not in self.block_of:                  # an id already cached elsewhere stays there
                self.block_of[h], self.content[b] = b, h
        self.block_tables[req], self.n_tokens[req] = table, n_tokens
        if req not in self.seen:
            self.seen.add(req)
            self.hit_tokens += len(hits) * block_size
            self.prompt_tokens += n_tokens
        self.prefilled_tokens += n_tokens - len(hits) * block_size

    def append_token(self, req: int) -> None:
        """Append one token to ``req``, taking a free block when its last one is full."""
        if self.needs_block(req):
            if self.num_free == 0:
                raise OutOfBlocksError(f"no free block for request {req}")
            self.block_tables[req].append(self._take())
        self.n_tokens[req] += 1

    def free(self, req: int) -> None:
        """Release every block of ``req``, tail first: a block nobody else holds is free, and
        stays cached if it has an id."""
        table = self.block_tables.pop(req)
        del self.n_tokens[req]
        for b in reversed(table):
            self.readers[b] -= 1
            if self.readers[b] == 0:
                if b in self.content:
                    self.cached[b] = None
                else:
                    self.free_list.append(b)


class _Reservations:
    """The reservation policies behind ``BlockAllocator``'s interface: one contiguous range of
    ``footprint[req]`` slots per request, placed first-fit or by a buddy allocator; it never grows."""

    def __init__(self, pool: ContiguousAllocator | BuddyAllocator, footprint: list[int]) -> None:
        self.pool = pool
        self.footprint = footprint
        self.start: dict[int, int] = {}
        self.n_tokens: dict[int, int] = {}

    def allocate(self, req: int, n_tokens: int) -> None:
        at = self.pool.allocate(self.footprint[req])
        if at is None:
            raise OutOfBlocksError(f"no free range of {self.footprint[req]} slots for request {req}")
        self.start[req], self.n_tokens[req] = at, n_tokens

    def needs_block(self, req: int) -> bool:
        return False

    def append_token(self, req: int) -> None:
        self.n_tokens[req] += 1

    def free(self, req: int) -> None:
        self.pool.free(self.start.pop(req), self.footprint[req])
        del self.n_tokens[req]

    def slack(self, req: int) -> int:
        return self.footprint[req] - self.n_tokens[req]


def simulate_reference(requests: ArrayLike, pool_tokens: int, policy: str = "paged", block_size: int = 16,
                       max_model_len: int | None = None, *, arrival_steps: ArrayLike | None = None,
                       max_batch: int | None = None, allocator: str = "first_fit",
                       prefix_ids: Sequence[Sequence[int]] | None = None) -> SimResult:
    """``simulate`` (same arguments, explicit arrivals only), one step at a time.

    Every field is a per-step sum; with ``prefix_ids`` a shared block counts once per request
    that reads it, except in ``peak_pool_reserved_share``, which counts blocks held, as
    ``simulate`` does. A request that never fits is counted in ``rejected``.
    """
    reqs = as_requests(requests)
    n = len(reqs)
    pool_tokens = positive_integer("pool_tokens", pool_tokens)
    block_size = positive_integer("block_size", block_size)
    if allocator not in ALLOCATORS:
        raise ValueError(f"unknown allocator {allocator!r}; one of {', '.join(ALLOCATORS)}")
    if prefix_ids is not None and (policy != "paged" or len(prefix_ids) != n):
        raise ValueError("prefix_ids need the paged policy and one entry per request")
    arrival = np.zeros(n, dtype=np.int64) if arrival_steps is None else np.asarray(arrival_steps)
    order = np.argsort(arrival, kind="stable").tolist()
    prompt, final = reqs[order, 0].tolist(), reqs[order].sum(axis=1).tolist()
    arrival = arrival[order].tolist()
    paged, buddy = policy == "paged", allocator == "buddy"
    if paged:
        num_blocks = pool_tokens // block_size
        alloc: BlockAllocator | _PrefixCachedBlocks | _Reservations = (
            BlockAllocator(num_blocks, block_size) if prefix_ids is None else
            _PrefixCachedBlocks(num_blocks, block_size, [[int(h) for h in prefix_ids[i]] for i in order]))
        fits = [-(-f // block_size) <= num_blocks for f in final]
    else:
        foot = [reserved_tokens(p, f - p, policy, max_model_len) for p, f in zip(prompt, final)]
        largest = 1 << (pool_tokens.bit_length() - 1) if buddy else pool_tokens
        fits = [(BuddyAllocator.chunk_tokens(x) if buddy else x) <= largest for x in foot]
        alloc = _Reservations(BuddyAllocator(pool_tokens) if buddy else ContiguousAllocator(pool_tokens),
                              foot)
        block_size = 1
    pending = deque(r for r in range(n) if fits[r])   # not arrived yet
    to_finish = len(pending)
    waiting: deque[int] = deque()                     # arrived, not running
    running: list[int] = []                           # in admission order
    prefill = list(prompt)                            # tokens prefilled at the next admission
    step = completed = preemptions = recomputed = 0
    last = -1
    sum_held = sum_reserved = sum_internal = sum_rounding = token_steps = 0
    peak_held = peak_reserved = max_running = max_slack = 0
    while completed < to_finish:
        while pending and arrival[pending[0]] <= step:
            waiting.append(pending.popleft())
        # Grow: each running request appends a token, oldest first; with no block free, the
        # newest is preempted (perhaps the one asking) and re-queued first, to be prefilled again.
        preempted = False
        i = 0
        while i < len(running):
            r = running[i]
            if alloc.needs_block(r) and alloc.num_free == 0:
                victim = running.pop()
                prefill[victim] = alloc.n_tokens[victim]
                recomputed += prefill[victim]
                alloc.free(victim)
                waiting.appendleft(victim)
                preemptions += 1
                preempted = True
                continue
            alloc.append_token(r)
            i += 1
        # Admit, first come first served, while the head of the queue fits.
        while not preempted and waiting and len(running) < (max_batch or n):
            try:
                alloc.allocate(waiting[0], prefill[waiting[0]])
            except OutOfBlocksError:
                break
            running.append(waiting.popleft())
        # Measure (requests admitted or finishing in this step count).
        held = {r: alloc.n_tokens[r] for r in running}
        reserved = {r: held[r] + alloc.slack(r) for r in running}
        sum_held += sum(held.values())
        sum_reserved += sum(reserved.values())
        sum_internal += sum(max(0, reserved[r] - final[r]) for r in running)
        if buddy and not paged:
            sum_rounding += sum(BuddyAllocator.chunk_tokens(foot[r]) - foot[r] for r in running)
        token_steps += len(running)
        peak_held = max(peak_held, sum(held.values()))
        peak_reserved = max(peak_reserved, alloc.num_used * block_size if paged
                            else sum(reserved.values()))
        max_running = max(max_running, len(running))
        max_slack = max([max_slack] + [reserved[r] - held[r] for r in running])
        # Requests at prompt + output tokens finish and free their memory.
        for r in sorted(r for r in running if held[r] == final[r]):
            running.remove(r)
            alloc.free(r)
            completed += 1
            last = step
        step += 1
    steps = last + 1
    pool_steps = steps * pool_tokens
    prefix = alloc if isinstance(alloc, _PrefixCachedBlocks) else None
    return SimResult(
        policy=policy, block_size=block_size, pool_tokens=pool_tokens, requests=n,
        completed=completed, rejected=n - to_finish, steps=steps, preemptions=preemptions,
        recomputed_tokens=recomputed, token_steps=token_steps,
        token_utilization=sum_held / sum_reserved if sum_reserved else 0.0,
        reservation_waste=(sum_reserved - sum_held - sum_internal) / sum_reserved if sum_reserved else 0.0,
        internal_waste=sum_internal / sum_reserved if sum_reserved else 0.0,
        pool_token_share=sum_held / pool_steps if steps else 0.0,
        pool_reserved_share=sum_reserved / pool_steps if steps else 0.0,
        peak_pool_token_share=peak_held / pool_tokens, peak_pool_reserved_share=peak_reserved / pool_tokens,
        max_slack_tokens=max_slack, mean_batch=token_steps / steps if steps else 0.0,
        max_batch=max_running, completed_per_step=completed / steps if steps else 0.0,
        allocator=allocator, pool_rounding_share=sum_rounding / pool_steps if steps else 0.0,
        prefix_hit_tokens=prefix.hit_tokens if prefix else 0,
        prefix_prompt_tokens=prefix.prompt_tokens if prefix else 0,
        prefix_prefill_tokens=prefix.prefilled_tokens if prefix else 0)
