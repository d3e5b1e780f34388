"""Prefix caches: how many prompt tokens a serving engine serves from its KV cache.

``replay_prefix_cache(requests, engine=..., block_size=..., capacity_blocks=...)`` sends requests
one after another through an engine's prefix cache (each request is admitted, computed and freed
before the next arrives) and returns, per request, the prompt tokens the cache served.

Two engines:

* ``"vllm"`` — vLLM v1's block cache, as in vLLM 0.33.0 (``vllm/v1/core/block_pool.py``,
  ``kv_cache_utils.py``, ``single_type_kv_cache_manager.py``, ``kv_cache_manager.py``): only full
  blocks are cached, under chained hashes (a block's hash covers every token before it); a hit is
  the longest run of cached blocks among the first ⌊(T − 1) / P⌋ blocks of a T-token prompt (the
  last prompt token is always recomputed, "to obtain logits"); a request touches its hit blocks,
  takes new blocks from the front of the free queue (evicting the hash a reused block held), and
  on release returns its blocks tail first — hashed blocks to the back of the queue (LRU),
  blocks without a hash (a partial last block) to the front. Identical blocks computed twice are
  both cached; a lookup takes the one cached first. ``tests/test_prefix.py`` replays workloads
  through vLLM's own ``KVCacheManager`` and requires identical hits.
* ``"sglang"`` — SGLang's radix tree (``python/sglang/srt/mem_cache/radix_cache.py``,
  sgl-project/sglang at 006b0e3): a trie of token runs at page granularity (``block_size`` = the
  page size; SGLang's default is 1 token), matched on the prompt without its last token
  (``Req._compute_max_prefix_len``: "at most 1 less than the input length") and cut to whole
  pages; nodes split where a match ends; a finished request inserts its page-aligned tokens;
  when the pool is short, least-recently-used unlocked leaves are evicted whole until the
  shortfall is covered. This follows the source, not a run of the engine.

Requests are token-id sequences (lists or integer arrays), or a ``BlockTrace``: per request, the
chained block-hash ids that public traces publish instead of tokens (Mooncake: 512-token blocks).
Token sequences are reduced to the same form first — each full block gets an id that stands for
its whole prefix — so both forms run through one block-level cache.
"""
from __future__ import annotations

import heapq
import json
import numbers
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice, takewhile
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.checks import positive_integer

ENGINES = ("vllm", "sglang")
#: Tokens per block of the Mooncake traces' hash ids (FAST25-release/README.md).
MOONCAKE_BLOCK_TOKENS = 512


# --- requests as chained block ids ----------------------------------------------------------

@dataclass(frozen=True)
class BlockTrace:
    """Requests as block-hash ids: request i's ids are ``hash_ids[offsets[i]:offsets[i + 1]]``.

    Ids are chained: two requests share an id at position j only if their first (j + 1) blocks
    are identical, as Mooncake's "remapped prefix block hashes" are. ``input_tokens[i]`` is the
    prompt length (tokens). The ids cover the prompt — or, with ``ids_cover_output``, the prompt
    and all output tokens but the last, which is what an engine leaves cached — in T covered
    tokens: ⌊T / P⌋ full-block ids and, when T is not a multiple of ``block_size`` P, possibly one
    more for the partial last block (never cached). ``output_tokens`` and ``timestamps_ms`` are
    optional per-request columns of the trace.
    """

    hash_ids: NDArray[np.int64]
    offsets: NDArray[np.int64]
    input_tokens: NDArray[np.int64]
    block_size: int
    output_tokens: NDArray[np.int64] | None = None
    timestamps_ms: NDArray[np.int64] | None = None
    ids_cover_output: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "block_size", positive_integer("block_size", self.block_size))
        n = len(self.input_tokens)
        if n == 0:
            raise ValueError("a BlockTrace needs at least one request")
        if self.offsets.shape != (n + 1,) or self.offsets[0] != 0 \
                or self.offsets[-1] != len(self.hash_ids) or (np.diff(self.offsets) < 0).any():
            raise ValueError("offsets must run from 0 to len(hash_ids), one more than the requests")
        if self.hash_ids.size and self.hash_ids.min() < 0:
            raise ValueError("hash ids must be >= 0")
        if (self.input_tokens < 1).any():
            bad = int(np.flatnonzero(self.input_tokens < 1)[0])
            raise ValueError(f"request {bad} has {int(self.input_tokens[bad])} input tokens; need >= 1")
        for name in ("output_tokens", "timestamps_ms"):
            column = getattr(self, name)
            if column is not None and column.shape != (n,):
                raise ValueError(f"{name} must have one value per request ({n})")
        if self.ids_cover_output and (self.output_tokens is None or (self.output_tokens < 1).any()):
            raise ValueError("ids_cover_output needs output_tokens >= 1 for every request")
        counts = np.diff(self.offsets)
        covered = self.covered_tokens
        full = covered // self.block_size
        blocks = -(-covered // self.block_size)
        bad = np.flatnonzero((counts < full) | (counts > blocks))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"request {i}: {int(counts[i])} hash ids for {int(covered[i])} "
                             f"tokens in {self.block_size}-token blocks (need {int(full[i])} to "
                             f"{int(blocks[i])})")

    @property
    def covered_tokens(self) -> NDArray[np.int64]:
        """Tokens the ids of each request cover (prompt, plus output − 1 with ``ids_cover_output``)."""
        if self.ids_cover_output:
            assert self.output_tokens is not None
            return self.input_tokens + self.output_tokens - 1
        return self.input_tokens

    def __len__(self) -> int:
        return len(self.input_tokens)

    def ids(self, i: int) -> NDArray[np.int64]:
        """Block ids of request ``i``."""
        return self.hash_ids[self.offsets[i]:self.offsets[i + 1]]

    @classmethod
    def from_lists(cls, hash_ids: Sequence[Sequence[int]], input_tokens: ArrayLike, block_size: int,
                   output_tokens: ArrayLike | None = None, timestamps_ms: ArrayLike | None = None,
                   ids_cover_output: bool = False) -> "BlockTrace":
        """A trace from one id list per request and the prompt lengths (tokens)."""
        lengths = np.fromiter((len(h) for h in hash_ids), dtype=np.int64, count=len(hash_ids))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = (np.fromiter((x for h in hash_ids for x in h), dtype=np.int64, count=int(offsets[-1]))
                if offsets[-1] else np.zeros(0, dtype=np.int64))
        return cls(flat, offsets, np.asarray(input_tokens, dtype=np.int64), block_size,
                   _column(output_tokens), _column(timestamps_ms), ids_cover_output)

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], block_size: int) -> "BlockTrace":
        """A trace from Mooncake-style records: ``input_length``, ``hash_ids`` and optionally
        ``output_length`` and ``timestamp`` (ms)."""
        rows = list(records)
        if not rows:
            raise ValueError("no records")
        missing = [k for k in ("input_length", "hash_ids") if k not in rows[0]]
        if missing:
            raise KeyError(f"trace records lack {', '.join(missing)}")
        outputs = [r["output_length"] for r in rows] if "output_length" in rows[0] else None
        stamps = [r["timestamp"] for r in rows] if "timestamp" in rows[0] else None
        return cls.from_lists([r["hash_ids"] for r in rows], [r["input_length"] for r in rows],
                              block_size, outputs, stamps)

    def coarsen(self, factor: int) -> "BlockTrace":
        """The same requests in blocks ``factor`` times larger: a coarse block's id is the id of
        its last fine block (chained ids identify the whole prefix), so hits are exact."""
        factor = positive_integer("factor", factor)
        if factor == 1:
            return self
        size = self.block_size * factor
        coarse = (-(-self.covered_tokens // size)).tolist()
        lists = []
        for i in range(len(self)):
            ids = self.ids(i)
            kept = ids[factor - 1::factor].tolist()
            if len(kept) < coarse[i] and len(ids) > len(kept) * factor:
                kept.append(int(ids[-1]))  # a partial last coarse block: its last fine id
            lists.append(kept)
        return BlockTrace.from_lists(lists, self.input_tokens, size, self.output_tokens,
                                     self.timestamps_ms, self.ids_cover_output)

    def head(self, n: int) -> "BlockTrace":
        """The first ``n`` requests."""
        n = min(positive_integer("n", n), len(self))
        end = int(self.offsets[n])
        outputs = None if self.output_tokens is None else self.output_tokens[:n]
        stamps = None if self.timestamps_ms is None else self.timestamps_ms[:n]
        return BlockTrace(self.hash_ids[:end], self.offsets[:n + 1], self.input_tokens[:n],
                          self.block_size, outputs, stamps, self.ids_cover_output)


def _column(values: ArrayLike | None) -> NDArray[np.int64] | None:
    return None if values is None else np.asarray(values, dtype=np.int64)


def load_trace(path: str | Path, block_size: int) -> BlockTrace:
    """A trace from a Mooncake-format JSONL file (one request per line)."""
    with open(path, encoding="utf-8") as f:
        return BlockTrace.from_records((json.loads(line) for line in f if line.strip()), block_size)


def _runs(text: str) -> list[int]:
    """'46-57 2353' → [46, 47, ..., 57, 2353]."""
    out: list[int] = []
    for part in text.split():
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def read_trace_csv(path: str | Path, block_size: int) -> BlockTrace:
    """A trace stored in the book's format (``data/traces/README.md``): columns ``timestamp_ms``,
    ``input_tokens``, ``output_tokens`` and ``hash_id_runs``."""
    import csv

    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no requests")
    missing = {"timestamp_ms", "input_tokens", "output_tokens", "hash_id_runs"} - set(rows[0])
    if missing:
        raise KeyError(f"{path} lacks column(s) {', '.join(sorted(missing))}")
    return BlockTrace.from_lists([_runs(r["hash_id_runs"]) for r in rows],
                                 [int(r["input_tokens"]) for r in rows], block_size,
                                 [int(r["output_tokens"]) for r in rows],
                                 [int(r["timestamp_ms"]) for r in rows])


def mooncake_conversation() -> BlockTrace:
    """Mooncake's FAST'25 conversation trace (12,031 requests, 512-token blocks), from
    ``data/traces/mooncake_conversation.csv``."""
    from ..core.data import csv_path

    return read_trace_csv(csv_path("traces/mooncake_conversation.csv"), MOONCAKE_BLOCK_TOKENS)


def _as_tokens(seq: Any, what: str) -> NDArray[np.int64]:
    arr = np.asarray(seq)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{what} must be a non-empty 1-D sequence of token ids, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integer token ids, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


class BlockHasher:
    """Chained block ids for token sequences: block j of a sequence gets the id of
    (id of block j − 1, its ``block_size`` tokens), interned, so equal ids mean equal prefixes.

    Exact (a dict of byte strings, no hash collisions); one dict operation per full block.
    """

    def __init__(self, block_size: int) -> None:
        self.block_size = positive_integer("block_size", block_size)
        self._ids: dict[tuple[int, bytes], int] = {}

    def __call__(self, tokens: NDArray[np.int64]) -> list[int]:
        """Ids of the full blocks of ``tokens`` (int64 array)."""
        width = self.block_size * 8
        buf = tokens.tobytes()
        table = self._ids
        parent, out = -1, []
        for start in range(0, len(tokens) // self.block_size * width, width):
            key = (parent, buf[start:start + width])
            parent = table.get(key, -2)
            if parent == -2:
                parent = table[key] = len(table)
            out.append(parent)
        return out


#: One request at block level: (ids of the full blocks it leaves cached, blocks its prompt may
#: hit, blocks it holds while running, prompt tokens).
_Request = tuple[list[int], int, int, int]


def _token_requests(requests: Sequence[Any], block_size: int,
                    outputs: Sequence[Any] | None) -> Iterator[_Request]:
    """Token sequences → block-level requests. With ``outputs``, a request leaves prompt + all
    output tokens but the last cached (the last sampled token is never fed back)."""
    hasher = BlockHasher(block_size)
    for i, prompt in enumerate(requests):
        tokens = _as_tokens(prompt, f"request {i}")
        n = len(tokens)
        if outputs is not None:
            out = _as_tokens(outputs[i], f"output {i}")
            tokens = np.concatenate([tokens, out[:-1]])
        yield hasher(tokens), (n - 1) // block_size, -(-len(tokens) // block_size), n


def _trace_requests(trace: BlockTrace, chunk: int = 4096) -> Iterator[_Request]:
    """A trace's requests, converting ids to Python ints ``chunk`` requests at a time."""
    bs = trace.block_size
    offsets = trace.offsets.tolist()
    tokens = trace.input_tokens.tolist()
    covered = trace.covered_tokens.tolist()
    for lo in range(0, len(tokens), chunk):
        hi = min(lo + chunk, len(tokens))
        base = offsets[lo]
        flat = trace.hash_ids[base:offsets[hi]].tolist()
        for i in range(lo, hi):
            n, m = tokens[i], covered[i]
            start = offsets[i] - base
            yield flat[start:start + m // bs], (n - 1) // bs, -(-m // bs), n


def block_level(requests: BlockTrace | Sequence[Any], block_size: int,
                outputs: Sequence[Any] | None = None) -> Iterator[_Request]:
    """Requests (token sequences or a trace) as block-level tuples: (ids of the full blocks a
    request leaves cached, blocks its prompt may hit, blocks it holds, prompt tokens)."""
    _check_requests(requests, outputs)
    if isinstance(requests, BlockTrace):
        return _trace_requests(_coarsened(requests, block_size))
    return _token_requests(requests, positive_integer("block_size", block_size), outputs)


def _check_requests(requests: BlockTrace | Sequence[Any], outputs: Sequence[Any] | None) -> None:
    if isinstance(requests, BlockTrace):
        if outputs is not None:
            raise ValueError("outputs apply to token sequences, not to a BlockTrace")
    elif len(requests) == 0:
        raise ValueError("no requests")
    elif outputs is not None and len(outputs) != len(requests):
        raise ValueError(f"{len(outputs)} outputs for {len(requests)} requests")


def block_requests(requests: BlockTrace | Sequence[Any], block_size: int,
                   outputs: Sequence[Any] | None = None) -> BlockTrace:
    """Token sequences (or a trace) as a ``BlockTrace`` of ``block_size``-token blocks, hashed
    once so that replays, routers and ``kvlib.simulate`` can share it. With ``outputs`` the ids
    also cover the outputs (``ids_cover_output``). Only full blocks get ids."""
    if isinstance(requests, BlockTrace):
        _check_requests(requests, outputs)
        return _coarsened(requests, block_size)
    reqs = list(block_level(requests, block_size, outputs))
    out_tokens = None if outputs is None else [len(o) for o in outputs]
    return BlockTrace.from_lists([ids for ids, *_ in reqs], [n for *_, n in reqs], block_size,
                                 out_tokens, ids_cover_output=outputs is not None)


def prompt_block_ids(trace: BlockTrace) -> list[list[int]]:
    """Ids of each request's full prompt blocks: the ``prefix_ids`` of ``kvlib.simulate``."""
    bs = trace.block_size
    return [trace.ids(i)[:n // bs].tolist() for i, n in enumerate(trace.input_tokens.tolist())]


def _coarsened(trace: BlockTrace, block_size: int) -> BlockTrace:
    block_size = positive_integer("block_size", block_size)
    if block_size % trace.block_size:
        raise ValueError(f"block_size {block_size} is not a multiple of the trace's "
                         f"{trace.block_size}-token blocks")
    return trace.coarsen(block_size // trace.block_size)


# --- vLLM v1: a block pool with a free queue -------------------------------------------------

class VllmBlockCache:
    """vLLM v1's prefix cache for one full-attention KV-cache group, one request at a time.

    ``capacity_blocks`` = usable blocks (vLLM's ``num_gpu_blocks`` − 1 null block); ``None``
    keeps every block ever computed. Between requests every block is free, and vLLM's free
    queue is two parts: blocks without a hash at the front (interchangeable: only their number
    matters) and hashed blocks behind them in release order (``_lru``, oldest first). A hashed
    block is keyed by the id it caches; when vLLM holds a second copy of an id (a block
    recomputed although cached), the copy gets a key ``(id, n)`` and ``_copies[id]`` lists the
    id's keys in caching order — a lookup takes the first, as vLLM's ``get_one_block`` does.
    """

    def __init__(self, capacity_blocks: int | None = None) -> None:
        self.capacity_blocks = None if capacity_blocks is None else positive_integer(
            "capacity_blocks", capacity_blocks)
        self.evicted_blocks = 0
        self._cached: set[int] = set()                   # unbounded: every id ever cached
        self._unhashed = self.capacity_blocks or 0       # free blocks without a hash
        self._lru: OrderedDict[Any, None] = OrderedDict()
        self._copies: dict[int, list[Any]] = {}          # id → its keys, if it has a copy key
        self._copy_keys: set[Any] = set()                # every key of the ids in _copies
        self._serial = 0

    def _keys(self, ids: Sequence[int]) -> list[Any]:
        """Keys of the longest cached run of ``ids`` (all free between requests)."""
        copies, lru = self._copies, self._lru
        if not copies or copies.keys().isdisjoint(ids):
            return list(takewhile(lru.__contains__, ids))
        keys = []
        for h in ids:
            key = copies[h][0] if h in copies else (h if h in lru else None)
            if key is None:
                break
            keys.append(key)
        return keys

    def match(self, ids: Sequence[int], limit: int) -> int:
        """Blocks of ``ids[:limit]`` a lookup would hit now (state unchanged)."""
        if self.capacity_blocks is None:
            found = list(map(self._cached.__contains__, ids[:limit]))
            return found.index(False) if False in found else len(found)
        return len(self._keys(ids[:limit]))

    def serve(self, ids: list[int], limit: int, alloc: int) -> int:
        """Admit, run and free one request that may hit ``ids[:limit]``, holds ``alloc`` blocks
        and leaves ``ids`` (its full blocks) cached. Returns the blocks hit."""
        cap = self.capacity_blocks
        if cap is None:
            k = self.match(ids, limit)
            self._cached.update(ids[k:])
            return k
        if alloc > cap:
            raise ValueError(f"a request of {alloc} blocks does not fit {cap} blocks")
        lru = self._lru
        hit = (self._keys(ids[:limit]) if self._copies   # the longest cached run
               else list(takewhile(lru.__contains__, islice(ids, limit))))
        k = len(hit)
        to_back = lru.move_to_end                        # touch: in use, so behind every
        deque(map(to_back, hit), 0)                      # block eviction may take (cap − k)
        fresh = min(alloc - k, self._unhashed)           # get_new_blocks, from the front:
        self._unhashed -= fresh                          # first the blocks without a hash,
        evict = alloc - k - fresh                        # then the least recently freed
        if evict:
            victims = list(islice(lru, evict))
            deque(map(lru.__delitem__, victims), 0)
            if self._copy_keys and not self._copy_keys.isdisjoint(victims):
                for key in victims:
                    if key in self._copy_keys:
                        self._forget(key)
            self.evicted_blocks += evict
        rest = ids[k:]                                   # cache_full_blocks
        self._unhashed += alloc - k - len(rest)          # free, tail first: blocks without a
        if lru.keys().isdisjoint(rest) and (not self._copies or self._copies.keys().isdisjoint(rest)):
            lru.update(dict.fromkeys(rest[::-1]))        # hash to the front, hashed ones to
            deque(map(to_back, reversed(hit)), 0)        # the back
            return k
        deque(map(lru.__delitem__, hit), 0)              # an id already cached: a copy key
        keys = [self._new_key(h) for h in rest]          # (the touched blocks are not free)
        lru.update(dict.fromkeys(keys[::-1]))
        lru.update(dict.fromkeys(hit[::-1]))
        return k

    def _new_key(self, h: int) -> Any:
        """Key for a newly cached block of id ``h``: ``h``, or a copy key if ``h`` is cached."""
        if h not in self._copies and h not in self._lru:
            return h
        self._serial += 1
        key = (h, self._serial)
        keys = self._copies.setdefault(h, [h])
        keys.append(key)
        self._copy_keys.update(keys)
        return key

    def _forget(self, key: Any) -> None:
        """Drop evicted ``key`` from the copy lists."""
        h = key[0] if isinstance(key, tuple) else key
        keys = self._copies[h]
        keys.remove(key)
        self._copy_keys.discard(key)
        if not keys or keys == [h]:
            del self._copies[h]
            self._copy_keys.difference_update(keys)


class VllmBlockPool:
    """vLLM v1's ``BlockPool`` shared by requests running at once (``simulate_serving``'s
    prefix caching): the concurrent form of ``VllmBlockCache``, with the same rules.

    Physical blocks are numbered as they leave the unhashed part of the free queue. ``ref``
    counts each in-use block's readers (a hit shares a block another request holds); the free
    queue is ``unhashed`` interchangeable blocks at the front, then ``lru``: free hashed blocks,
    least recently freed first, cached until ``take`` evicts them. ``by_id`` maps a cached id to
    its block, or (an id cached twice) to its blocks in caching order: a lookup takes the first,
    as vLLM's ``get_one_block`` does.
    """

    def __init__(self, num_blocks: int) -> None:
        self.unhashed = positive_integer("num_blocks", num_blocks)
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.ref: dict[int, int] = {}
        self.hash_of: dict[int, int] = {}
        self.by_id: dict[int, int | dict[int, None]] = {}
        self.evicted_blocks = 0
        self._serial = 0

    @property
    def free_blocks(self) -> int:
        """Blocks no request holds, cached ones included."""
        return self.unhashed + len(self.lru)

    def lookup(self, ids: Iterable[int]) -> list[int]:
        """Blocks of the longest cached run of ``ids`` (callers cut ``ids`` to the blocks a hit
        may cover: never the last prompt token's)."""
        out, by_id = [], self.by_id
        for h in ids:
            blocks = by_id.get(h)
            if blocks is None:
                break
            out.append(blocks if type(blocks) is int else next(iter(blocks)))
        return out

    def idle(self, blocks: Iterable[int]) -> int:
        """How many of ``blocks`` are free (touching them takes them off the free queue)."""
        return sum(b in self.lru for b in blocks)

    def touch(self, blocks: Iterable[int]) -> None:
        """A hit: each block gains a reader; a free one leaves the free queue."""
        ref, lru = self.ref, self.lru
        for b in blocks:
            if b in lru:
                del lru[b]
                ref[b] = 1
            else:
                ref[b] += 1

    def take(self, n: int) -> list[int]:
        """``n`` new blocks from the front of the free queue: unhashed ones first, then the
        least recently freed cached ones, whose ids are evicted."""
        fresh = min(n, self.unhashed)
        self.unhashed -= fresh
        out = list(range(self._serial, self._serial + fresh))
        self._serial += fresh
        by_id, hash_of, pop = self.by_id, self.hash_of, self.lru.popitem
        for _ in range(n - fresh):
            b, _ = pop(last=False)
            h = hash_of.pop(b)
            blocks = by_id[h]
            if type(blocks) is int:
                del by_id[h]
            else:
                del blocks[b]
                if not blocks:
                    del by_id[h]
            out.append(b)
        self.evicted_blocks += n - fresh
        for b in out:
            self.ref[b] = 1
        return out

    def cache(self, block: int, h: int) -> None:
        """``block`` now holds the full block of id ``h`` (a second copy of an id is kept too)."""
        self.hash_of[block] = h
        blocks = self.by_id.get(h)
        if blocks is None:
            self.by_id[h] = block
        elif type(blocks) is int:
            self.by_id[h] = {blocks: None, block: None}
        else:
            blocks[block] = None

    def release(self, blocks: Sequence[int]) -> None:
        """Free a request's ``blocks``, tail first: a block no one reads any more goes to the
        back of the free queue if it is cached, otherwise to the front."""
        ref = self.ref
        for b in reversed(blocks):
            ref[b] -= 1
            if not ref[b]:
                del ref[b]
                if b in self.hash_of:
                    self.lru[b] = None
                else:
                    self.unhashed += 1


def _whole_numbers(name: str, values: ArrayLike) -> NDArray[np.int64]:
    """``values`` flattened to int64: ValueError naming ``name`` and the first value that is not
    a whole number (a fraction, NaN, an infinity, a bool, a string)."""
    arr = np.asarray(values)
    flat = arr.reshape(-1)
    if arr.dtype.kind not in "iuf":
        items = [x.item() if isinstance(x, np.generic) else x for x in flat.tolist()]
        i = next((j for j, x in enumerate(items)
                  if isinstance(x, bool) or not isinstance(x, numbers.Integral)), 0)
        shown = repr(items[i]) if items else str(arr.dtype)
        raise ValueError(f"{name} must hold integers; value {i} is {shown}")
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~(np.isfinite(flat) & (flat == np.round(flat)) & (np.abs(flat) < 2.0**62))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{name} must hold integers; value {i} is {float(flat[i])!r}")
    return flat.astype(np.int64)


def shared_prefix_ids(prefix_id: ArrayLike, prefix_tokens: ArrayLike, prompt_tokens: ArrayLike,
                      block_size: int = 16) -> list[list[int]]:
    """Ids of each request's full prompt blocks when requests with the same ``prefix_id``
    share their first ``prefix_tokens`` tokens and differ after them (a system prompt, a
    conversation's history): ``simulate_serving``'s ``prefix_ids``. A request with
    ``prefix_tokens`` 0 shares nothing. Ids are ≥ 0, chained like ``block_requests``' (equal
    at block j only when the first j + 1 blocks are equal)."""
    bs = positive_integer("block_size", block_size)
    pid, shared, prompt = (_whole_numbers(name, x) for name, x in (
        ("prefix_id", prefix_id), ("prefix_tokens", prefix_tokens),
        ("prompt_tokens", prompt_tokens)))
    if not len(pid) == len(shared) == len(prompt):
        raise ValueError("prefix_id, prefix_tokens and prompt_tokens need one value per request")
    if (shared < 0).any() or (shared > prompt).any():
        raise ValueError("prefix_tokens must lie between 0 and the request's prompt tokens")
    n_shared = shared // bs
    keys: dict[tuple[int, ...], int] = {}
    out = []
    for i, (p, k, t) in enumerate(zip(pid.tolist(), n_shared.tolist(), prompt.tolist())):
        ids = [keys.setdefault((p, j), len(keys)) for j in range(k)]
        out.append(ids + [keys.setdefault((i, j, 0), len(keys)) for j in range(k, t // bs)])
    return out


# --- SGLang: a radix tree with LRU leaf eviction ---------------------------------------------

class _Node:
    __slots__ = ("key", "children", "parent", "last", "serial", "lock")

    def __init__(self, key: list, parent: "_Node | None", last: int, serial: int) -> None:
        self.key = key
        self.children: dict[Any, _Node] = {}
        self.parent = parent
        self.last = last
        self.serial = serial
        self.lock = 0


def _common_prefix(a: list, b: list) -> int:
    """Length of the common prefix of two lists (slice comparisons, no per-item Python loop)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class RadixCache:
    """SGLang's radix tree over units (tokens at page size 1, or chained page ids), one request
    at a time, in a pool of ``capacity_units`` units (``None``: unbounded).

    Access stamps count match and insert calls (SGLang stamps with a clock); ties among leaves
    go to the older node.
    """

    def __init__(self, capacity_units: int | None = None) -> None:
        self.capacity_units = None if capacity_units is None else positive_integer(
            "capacity_units", capacity_units)
        self.evicted_units = 0
        self.size = 0                                    # units held by the tree
        self._clock = 0
        self._serial = 0
        self.root = self._node([], None)
        self.root.lock = 1
        self._heap: list[tuple[int, int, _Node]] = []

    def _node(self, key: list, parent: _Node | None) -> _Node:
        self._serial += 1
        return _Node(key, parent, self._clock, self._serial)

    def _walk(self, key: list, insert: bool, touched: list[_Node]) -> tuple[_Node, int]:
        """Match (and with ``insert``, add) ``key`` from the root, splitting the node where the
        match ends and stamping every node on the path (appended to ``touched``). Returns the
        last node and the units matched."""
        self._clock += 1
        stamp = self._clock
        node, pos = self.root, 0
        while pos < len(key):
            child = node.children.get(key[pos])
            if child is None:
                break
            child.last = stamp
            touched.append(child)
            cp = _common_prefix(child.key, key[pos:])
            if cp < len(child.key):
                node = self._split(child, cp)
                pos += cp
                break
            node, pos = child, pos + cp
        if insert and pos < len(key):
            leaf = self._node(key[pos:], node)
            node.children[key[pos]] = leaf
            touched.append(leaf)
            self.size += len(key) - pos
            node, pos = leaf, len(key)
        return node, pos

    def _split(self, child: _Node, at: int) -> _Node:
        parent = child.parent
        assert parent is not None
        mid = self._node(child.key[:at], parent)
        mid.lock = child.lock
        parent.children[mid.key[0]] = mid
        child.key = child.key[at:]
        child.parent = mid
        mid.children[child.key[0]] = child
        return mid

    def _lock(self, node: _Node, delta: int) -> None:
        while node is not self.root:
            node.lock += delta
            node = node.parent  # type: ignore[assignment]

    def _push(self, node: _Node) -> None:
        if node is not self.root and node.key is not None and not node.children and node.lock == 0:
            heapq.heappush(self._heap, (node.last, node.serial, node))

    def _push_all(self, nodes: list[_Node]) -> None:
        """Heap entries for the evictable leaves among ``nodes`` (older entries go stale)."""
        for node in nodes:
            self._push(node)

    def _evict(self, units: int) -> None:
        """Free at least ``units`` units by deleting least-recently-used unlocked leaves."""
        freed = 0
        heap = self._heap
        while freed < units and heap:
            last, _, node = heapq.heappop(heap)
            if node.key is None or node.children or node.lock or node.last != last:
                continue                                 # stale entry
            parent = node.parent
            assert parent is not None
            del parent.children[node.key[0]]
            freed += len(node.key)
            self.size -= len(node.key)
            self.evicted_units += len(node.key)
            node.key = None  # type: ignore[assignment]
            self._push(parent)

    def serve(self, units: list, limit: int, alloc: int) -> int:
        """Match ``units[:limit]``, hold ``alloc`` units while running (evicting if short),
        then insert ``units``. Returns the units hit."""
        touched: list[_Node] = []
        last, hit = self._walk(units[:limit], False, touched)
        cap = self.capacity_units
        if cap is not None:
            self._push_all(touched)                      # their stamps changed: fresh heap entries
            need = alloc - hit
            if alloc > cap:
                raise ValueError(f"a request of {alloc} units does not fit {cap} units")
            if need > cap - self.size:
                self._lock(last, 1)
                self._evict(need - (cap - self.size))
                self._lock(last, -1)
        self._walk(units, True, touched)
        if cap is not None:
            self._push_all(touched)
        return hit


# --- the replay -----------------------------------------------------------------------------

@dataclass(frozen=True)
class PrefixReplay:
    """Prompt tokens served from the prefix cache, per request, in arrival order.

    ``hit_tokens[i]`` ≤ ``prompt_tokens[i]`` − 1; ``evicted_blocks`` counts blocks (vLLM) or
    pages (SGLang) whose cached content was dropped to make room.
    """

    engine: str
    block_size: int
    capacity_blocks: int | None
    hit_tokens: NDArray[np.int64]
    prompt_tokens: NDArray[np.int64]
    evicted_blocks: int

    @property
    def hit_rate(self) -> float:
        """Cached ÷ prompt tokens over all requests (a fraction)."""
        return float(self.hit_tokens.sum() / self.prompt_tokens.sum())


def _radix_requests(requests: Sequence[Any], outputs: Sequence[Any] | None
                    ) -> Iterator[tuple[list, int, int, int]]:
    """Token sequences as radix units at page size 1: (units, limit, alloc, prompt tokens)."""
    for i, prompt in enumerate(requests):
        tokens = _as_tokens(prompt, f"request {i}")
        n = len(tokens)
        if outputs is not None:
            tokens = np.concatenate([tokens, _as_tokens(outputs[i], f"output {i}")[:-1]])
        yield tokens.tolist(), n - 1, len(tokens), n


def replay_prefix_cache(requests: BlockTrace | Sequence[Any], *, engine: str = "vllm",
                        block_size: int = 16, capacity_blocks: int | None = None,
                        outputs: Sequence[Any] | None = None) -> PrefixReplay:
    """Replay ``requests`` in order through ``engine``'s prefix cache; tokens hit per request.

    ``requests``: token-id sequences (each request's whole prompt; each finishes and is freed
    before the next), or a ``BlockTrace`` (``block_size`` must then be a multiple of the trace's).
    ``block_size``: tokens per KV block (vLLM) or per page (SGLang: 1 is its default).
    ``capacity_blocks``: blocks (pages) the pool holds; ``None`` = unbounded.
    ``outputs``: optional generated token ids per request (token form only); the engine caches
    them with the prompt, so a later turn that resends them can hit.
    A request longer than the pool, an unknown engine or a bad argument is a ValueError.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    block_size = positive_integer("block_size", block_size)
    if capacity_blocks is not None:
        capacity_blocks = positive_integer("capacity_blocks", capacity_blocks)
    _check_requests(requests, outputs)
    hits: list[int] = []
    prompts: list[int] = []
    unit = block_size                                    # tokens per block (page) hit
    if engine == "sglang" and block_size == 1 and not isinstance(requests, BlockTrace):
        cache: VllmBlockCache | RadixCache = RadixCache(capacity_blocks)
        reqs: Iterable[tuple[list, int, int, int]] = _radix_requests(requests, outputs)
    else:
        reqs = block_level(requests, block_size, outputs)
        cache = VllmBlockCache(capacity_blocks) if engine == "vllm" else RadixCache(capacity_blocks)
    serve, hit, prompt = cache.serve, hits.append, prompts.append
    for ids, limit, alloc, n in reqs:
        try:
            hit(serve(ids, limit, alloc))
        except ValueError as exc:
            raise ValueError(f"request {len(hits)}: {exc}") from None
        prompt(n)
    evicted = cache.evicted_blocks if isinstance(cache, VllmBlockCache) else cache.evicted_units
    return PrefixReplay(engine, block_size, capacity_blocks,
                        np.asarray(hits, dtype=np.int64) * unit,
                        np.asarray(prompts, dtype=np.int64), evicted)
