"""Prompt workloads with prefix structure, as token-id sequences, for the prefix-cache chapter.

Each generator returns a ``PromptWorkload``: the requests' prompts (int64 token arrays) in
arrival order, the tokens each generates (cached by the engine with the prompt, so a later turn
that resends them can hit), and the session each belongs to (a conversation or agent run, for
routers). Text is random token ids from a 100,000-token vocabulary: two pieces of content share
a prefix only when the generator reuses them, as real system prompts, documents and histories
are reused. Lengths are uniform integers in [mean/2, 3·mean/2] (tokens). Every generator is
seeded and deterministic.

* ``system_prompt_chat`` — single-turn requests behind one of a few shared system prompts; with
  ``dynamic_tokens`` a per-request header (a timestamp, a user id) goes first or after the
  static part (``dynamic_first``);
* ``multi_turn_chat`` — conversations whose every turn resends the history, interleaved;
* ``few_shot`` — a fixed block of examples (or examples drawn from a pool) before each query;
* ``rag`` — retrieved documents (Zipf popularity) in retrieval order or in one canonical order;
* ``agent_loop`` — tool definitions (in a fixed or shuffled order) and a growing trajectory of
  tool calls and observations.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..core.checks import integer, number, positive_integer

VOCAB = 100_000  # token ids drawn from [0, VOCAB)


@dataclass(frozen=True)
class PromptWorkload:
    """Requests in arrival order: ``prompts[i]`` (tokens), ``outputs[i]`` (tokens it generates),
    ``sessions[i]`` (the conversation or run it belongs to)."""

    name: str
    prompts: list[NDArray[np.int64]]
    outputs: list[NDArray[np.int64]]
    sessions: NDArray[np.int64]

    def __post_init__(self) -> None:
        n = len(self.prompts)
        if n == 0 or len(self.outputs) != n or self.sessions.shape != (n,):
            raise ValueError(f"{self.name}: prompts, outputs and sessions must have one entry "
                             "per request")

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def prompt_tokens(self) -> NDArray[np.int64]:
        """Prompt length of each request (tokens)."""
        return np.fromiter((len(p) for p in self.prompts), dtype=np.int64, count=len(self))

    @property
    def output_tokens(self) -> NDArray[np.int64]:
        """Output length of each request (tokens)."""
        return np.fromiter((len(o) for o in self.outputs), dtype=np.int64, count=len(self))

    def lengths(self) -> NDArray[np.int64]:
        """(n, 2) prompt and output tokens: the ``requests`` argument of ``kvlib.simulate``."""
        return np.column_stack([self.prompt_tokens, self.output_tokens])


class _Text:
    """Random token runs with lengths around a mean, from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(integer("seed", seed))

    def length(self, mean: int) -> int:
        return int(self.rng.integers(max(1, mean // 2), max(1, mean // 2) + mean + 1))

    def tokens(self, n: int) -> NDArray[np.int64]:
        return self.rng.integers(0, VOCAB, n, dtype=np.int64)

    def text(self, mean: int) -> NDArray[np.int64]:
        return self.tokens(self.length(mean))


def _flag(name: str, value: object) -> bool:
    """``value`` if it is True or False (a numpy bool too): ValueError naming ``name`` else."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _lengths(minimum: int, **means: object) -> None:
    """Check token counts: each an integer >= ``minimum`` (ValueError naming it)."""
    for name, value in means.items():
        integer(name, value, minimum)


def _cat(*parts: NDArray[np.int64]) -> NDArray[np.int64]:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def system_prompt_chat(n_requests: int, *, system_tokens: int = 1000, user_tokens: int = 200,
                       output_tokens: int = 200, n_system_prompts: int = 1,
                       dynamic_tokens: int = 0, dynamic_first: bool = False,
                       seed: int = 0) -> PromptWorkload:
    """Single-turn requests: system prompt k (uniformly one of ``n_system_prompts``, each of
    exactly ``system_tokens``), then the user's message. ``dynamic_tokens`` > 0 adds a
    per-request header of that many tokens — first (``dynamic_first``) or right after the
    system prompt."""
    n = positive_integer("n_requests", n_requests)
    positive_integer("system_tokens", system_tokens)
    integer("dynamic_tokens", dynamic_tokens)
    _lengths(1, user_tokens=user_tokens, output_tokens=output_tokens)
    _flag("dynamic_first", dynamic_first)
    t = _Text(seed)
    systems = [t.tokens(system_tokens) for _ in range(positive_integer("n_system_prompts",
                                                                       n_system_prompts))]
    which = t.rng.integers(0, len(systems), n)
    prompts, outputs = [], []
    for k in which.tolist():
        header = t.tokens(dynamic_tokens)
        user = t.text(user_tokens)
        parts = (header, systems[k], user) if dynamic_first else (systems[k], header, user)
        prompts.append(_cat(*parts))
        outputs.append(t.text(output_tokens))
    return PromptWorkload("system prompt", prompts, outputs, np.arange(n, dtype=np.int64))


def multi_turn_chat(n_sessions: int, *, turns: int = 6, system_tokens: int = 1000,
                    user_tokens: int = 150, output_tokens: int = 300, n_system_prompts: int = 1,
                    geometric_turns: bool = False, seed: int = 0) -> PromptWorkload:
    """Conversations behind shared system prompts; turn k sends system + every earlier user
    message and answer + the new message, and generates answer k. ``turns`` per session, or
    geometric with that mean (``geometric_turns``: a few long conversations, many short).
    Sessions interleave: each starts at a uniform random time and spaces its turns by
    exponential think times, and requests arrive in time order."""
    n = positive_integer("n_sessions", n_sessions)
    positive_integer("turns", turns)
    _lengths(0, system_tokens=system_tokens)
    _lengths(1, user_tokens=user_tokens, output_tokens=output_tokens)
    _flag("geometric_turns", geometric_turns)
    t = _Text(seed)
    systems = [t.tokens(system_tokens) for _ in range(positive_integer("n_system_prompts",
                                                                       n_system_prompts))]
    events: list[tuple[float, int, NDArray[np.int64], NDArray[np.int64]]] = []
    for s in range(n):
        k = int(t.rng.geometric(1 / turns)) if geometric_turns else turns
        history = systems[int(t.rng.integers(0, len(systems)))]
        clock = float(t.rng.uniform(0, n))
        for _ in range(k):
            prompt = _cat(history, t.text(user_tokens))
            answer = t.text(output_tokens)
            events.append((clock, s, prompt, answer))
            history = _cat(prompt, answer)
            clock += float(t.rng.exponential(turns))
    events.sort(key=lambda e: (e[0], e[1]))
    return PromptWorkload("multi-turn chat", [e[2] for e in events], [e[3] for e in events],
                          np.asarray([e[1] for e in events], dtype=np.int64))


def few_shot(n_requests: int, *, shots: int = 5, shot_tokens: int = 70, query_tokens: int = 50,
             output_tokens: int = 50, pool: int = 0, system_tokens: int = 200,
             seed: int = 0) -> PromptWorkload:
    """Instructions, ``shots`` worked examples, then the query. ``pool`` = 0: the same examples
    in the same order every time; otherwise each request draws ``shots`` of ``pool`` examples."""
    n = positive_integer("n_requests", n_requests)
    shots = positive_integer("shots", shots)
    pool = integer("pool", pool)
    if pool and pool < shots:
        raise ValueError(f"pool ({pool}) must hold at least shots ({shots}) examples")
    _lengths(0, system_tokens=system_tokens)
    _lengths(1, shot_tokens=shot_tokens, query_tokens=query_tokens, output_tokens=output_tokens)
    t = _Text(seed)
    system = t.tokens(system_tokens)
    examples = [t.text(shot_tokens) for _ in range(pool or shots)]
    prompts, outputs = [], []
    for _ in range(n):
        chosen = (range(shots) if not pool else t.rng.choice(pool, shots, replace=False).tolist())
        prompts.append(_cat(system, *[examples[j] for j in chosen], t.text(query_tokens)))
        outputs.append(t.text(output_tokens))
    return PromptWorkload("few-shot", prompts, outputs, np.arange(n, dtype=np.int64))


def rag(n_requests: int, *, n_documents: int = 200, docs_per_request: int = 4,
        doc_tokens: int = 500, question_tokens: int = 40, output_tokens: int = 150,
        system_tokens: int = 300, zipf: float = 1.1, order: str = "retrieval",
        seed: int = 0) -> PromptWorkload:
    """System prompt, ``docs_per_request`` documents retrieved from ``n_documents`` (document
    d drawn with probability ∝ 1/(d+1)^zipf), then the question. ``order``: "retrieval" (the
    retriever's ranking, a random order per request) or "canonical" (sorted by document id, so
    requests that retrieve the same documents send the same prefix)."""
    n = positive_integer("n_requests", n_requests)
    n_docs = positive_integer("n_documents", n_documents)
    k = positive_integer("docs_per_request", docs_per_request, maximum=n_docs)
    if order not in ("retrieval", "canonical"):
        raise ValueError(f"order must be 'retrieval' or 'canonical', got {order!r}")
    weights = 1.0 / np.arange(1, n_docs + 1) ** number("zipf", zipf, minimum=0)
    _lengths(0, system_tokens=system_tokens)
    _lengths(1, doc_tokens=doc_tokens, question_tokens=question_tokens,
             output_tokens=output_tokens)
    t = _Text(seed)
    system = t.tokens(system_tokens)
    docs = [t.text(doc_tokens) for _ in range(n_docs)]
    prompts, outputs = [], []
    for _ in range(n):
        chosen = t.rng.choice(n_docs, k, replace=False, p=weights / weights.sum())
        if order == "canonical":
            chosen = np.sort(chosen)
        prompts.append(_cat(system, *[docs[d] for d in chosen.tolist()], t.text(question_tokens)))
        outputs.append(t.text(output_tokens))
    return PromptWorkload(f"RAG ({order} order)", prompts, outputs, np.arange(n, dtype=np.int64))


def agent_loop(n_sessions: int, *, steps: int = 8, system_tokens: int = 800, n_tools: int = 12,
               tool_tokens: int = 150, task_tokens: int = 200, call_tokens: int = 60,
               observation_tokens: int = 400, shuffle_tools: bool = False,
               seed: int = 0) -> PromptWorkload:
    """Agent runs: system prompt, ``n_tools`` tool definitions, the task, then the trajectory so
    far; each step generates a tool call and appends the call and its observation.
    ``shuffle_tools`` lists the tools in a new order for every request (e.g. a set iterated in
    hash order) instead of one fixed order. Runs interleave as in ``multi_turn_chat``."""
    n = positive_integer("n_sessions", n_sessions)
    steps = positive_integer("steps", steps)
    _lengths(0, system_tokens=system_tokens)
    _lengths(1, tool_tokens=tool_tokens, task_tokens=task_tokens, call_tokens=call_tokens,
             observation_tokens=observation_tokens)
    _flag("shuffle_tools", shuffle_tools)
    t = _Text(seed)
    system = t.tokens(system_tokens)
    tools = [t.text(tool_tokens) for _ in range(positive_integer("n_tools", n_tools))]
    events: list[tuple[float, int, NDArray[np.int64], NDArray[np.int64]]] = []
    for s in range(n):
        task = t.text(task_tokens)
        trajectory: list[NDArray[np.int64]] = []
        clock = float(t.rng.uniform(0, n))
        for _ in range(steps):
            order = t.rng.permutation(len(tools)).tolist() if shuffle_tools else range(len(tools))
            prompt = _cat(system, *[tools[j] for j in order], task, *trajectory)
            call = t.text(call_tokens)
            events.append((clock, s, prompt, call))
            trajectory += [call, t.text(observation_tokens)]
            clock += float(t.rng.exponential(steps))
    events.sort(key=lambda e: (e[0], e[1]))
    name = "agent loop (tools shuffled)" if shuffle_tools else "agent loop"
    return PromptWorkload(name, [e[2] for e in events], [e[3] for e in events],
                          np.asarray([e[1] for e in events], dtype=np.int64))
