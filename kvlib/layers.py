"""One small class per layer kind, each knowing the state it keeps for one sequence.

Counts are in *elements*; ``Model`` turns them into bytes with a dtype. Every class answers:

* ``elements_per_token(tp)`` — elements added per token on one GPU (0 for constant-state layers);
* ``tokens_held(n_tokens)`` — how many tokens' worth of per-token state a sequence of
  ``n_tokens`` keeps (capped for sliding windows);
* ``state_elements(tp)`` — constant per-sequence state on one GPU (recurrent layers).

``tp`` is the tensor-parallel degree. The rules follow vLLM: KV heads are split across GPUs
and replicated once GPUs outnumber them (``QKVParallelLinear`` in
``vllm/model_executor/layers/linear.py``; ``ModelConfig.get_num_kv_heads`` returns
``max(1, K // tp)``); an MLA latent is replicated on every GPU (``get_num_kv_heads`` returns 1
when ``use_mla``); recurrent heads must divide evenly (``divide`` in
``vllm/model_executor/layers/mamba/mamba_utils.py``), and Mamba-2 groups are split or, when
there is exactly one, replicated (``MambaMixer2``: "If tensor parallel world size does not divide
num_groups, then num_groups must equal 1").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Union

LayerKind = Literal["full", "sliding", "mla", "mamba2", "gated_deltanet", "none"]


def _check_positive(owner: str, **fields: object) -> None:
    for name, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{owner}: {name} must be a positive integer, got {value!r}")


def _check_tp(tp: int) -> None:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
        raise ValueError(f"tp (tensor-parallel degree) must be a positive integer, got {tp!r}")


def heads_per_gpu(n_heads: int, tp: int, what: str = "KV heads") -> int:
    """Heads one GPU holds under tensor parallelism ``tp``.

    Heads are split evenly when ``tp`` divides them; when GPUs outnumber heads each head is
    replicated so every GPU holds one (vLLM requires ``tp`` to be a multiple of the head
    count then). Any other combination is rejected, as engines reject it.
    """
    _check_tp(tp)
    if n_heads % tp == 0:
        return n_heads // tp
    if tp % n_heads == 0:
        return 1
    raise ValueError(f"{n_heads} {what} cannot be split across tp={tp} GPUs: "
                     "one must divide the other")


def split_evenly(n: int, tp: int, what: str) -> int:
    """``n`` divided across ``tp`` GPUs, which must divide it (vLLM's ``divide``)."""
    _check_tp(tp)
    if n % tp:
        raise ValueError(f"{n} {what} cannot be split across tp={tp} GPUs: "
                         f"tp must divide {n}")
    return n // tp


def mamba_groups_per_gpu(n_groups: int, tp: int) -> int:
    """Mamba-2 B/C groups on one GPU: split when ``tp`` divides them, a single group replicated."""
    _check_tp(tp)
    if n_groups % tp == 0:
        return n_groups // tp
    if n_groups == 1:
        return 1
    raise ValueError(f"{n_groups} mamba groups cannot be split across tp={tp} GPUs: vLLM needs "
                     "tp to divide the groups, or a single group")


class Layer(Protocol):
    """What every layer kind answers (counts in elements, for one sequence)."""

    @property
    def kind(self) -> LayerKind: ...

    def elements_per_token(self, tp: int = 1) -> int: ...

    def tokens_held(self, n_tokens: int) -> int: ...

    def state_elements(self, tp: int = 1) -> int: ...


@dataclass(frozen=True)
class AttentionLayer:
    """Softmax attention keeping K and V per token: MHA, GQA or MQA, full or sliding.

    n_kv_heads: KV heads (K); head_dim: K head dim (H); v_head_dim: V head dim (defaults to H);
    window: sliding-window length in tokens, None for full attention. A windowed layer keeps the
    last ``window − 1`` tokens: the next query attends to ``window`` tokens, itself included
    (vLLM's SlidingWindowManager and transformers' sliding cache keep the same).
    """

    n_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    window: int | None = None

    def __post_init__(self) -> None:
        _check_positive("attention layer", n_kv_heads=self.n_kv_heads, head_dim=self.head_dim)
        if self.v_head_dim is not None:
            _check_positive("attention layer", v_head_dim=self.v_head_dim)
        if self.window is not None:
            _check_positive("attention layer", window=self.window)

    @property
    def kind(self) -> LayerKind:
        return "full" if self.window is None else "sliding"

    def elements_per_token(self, tp: int = 1) -> int:
        v_dim = self.head_dim if self.v_head_dim is None else self.v_head_dim
        return heads_per_gpu(self.n_kv_heads, tp) * (self.head_dim + v_dim)

    def tokens_held(self, n_tokens: int) -> int:
        return n_tokens if self.window is None else min(n_tokens, self.window - 1)

    def state_elements(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0


@dataclass(frozen=True)
class MLALayer:
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed latent per token.

    Stores ``kv_lora_rank`` latent elements plus ``rope_dim`` decoupled RoPE key elements per
    token, shared by all heads — no separate K and V. The latent is replicated on every GPU
    under tensor parallelism.
    """

    kv_lora_rank: int
    rope_dim: int

    def __post_init__(self) -> None:
        _check_positive("MLA layer", kv_lora_rank=self.kv_lora_rank, rope_dim=self.rope_dim)

    @property
    def kind(self) -> LayerKind:
        return "mla"

    def elements_per_token(self, tp: int = 1) -> int:
        _check_tp(tp)
        return self.kv_lora_rank + self.rope_dim

    def tokens_held(self, n_tokens: int) -> int:
        return n_tokens

    def state_elements(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0


@dataclass(frozen=True)
class Mamba2Layer:
    """A Mamba-2 layer: constant per-sequence state, nothing per token.

    conv state: (conv_kernel − 1) × (n_heads × head_dim + 2 × n_groups × state_size);
    SSM state: n_heads × head_dim × state_size (vLLM's ``mamba_utils`` shapes).
    Heads split across GPUs (tp must divide them); groups split when tp divides them, a single
    group replicated.
    """

    n_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _check_positive("mamba layer", n_heads=self.n_heads, head_dim=self.head_dim,
                        state_size=self.state_size, n_groups=self.n_groups,
                        conv_kernel=self.conv_kernel)

    @property
    def kind(self) -> LayerKind:
        return "mamba2"

    def elements_per_token(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0

    def tokens_held(self, n_tokens: int) -> int:
        return 0

    def state_elements(self, tp: int = 1) -> int:
        return self.conv_elements(tp) + self.ssm_elements(tp)

    def conv_elements(self, tp: int = 1, width: int | None = None) -> int:
        """Convolution state on one GPU; ``width`` taps kept (vLLM: conv_kernel − 1)."""
        heads = split_evenly(self.n_heads, tp, "mamba heads")
        groups = mamba_groups_per_gpu(self.n_groups, tp)
        taps = self.conv_kernel - 1 if width is None else width
        return taps * (heads * self.head_dim + 2 * groups * self.state_size)

    def ssm_elements(self, tp: int = 1) -> int:
        """SSM (recurrent) state on one GPU: heads × head_dim × state_size."""
        return split_evenly(self.n_heads, tp, "mamba heads") * self.head_dim * self.state_size


@dataclass(frozen=True)
class GatedDeltaNetLayer:
    """A Gated DeltaNet linear-attention layer (Qwen3-Next, Qwen3.5): constant state.

    conv state: (conv_kernel − 1) × (2 × n_k_heads × k_head_dim + n_v_heads × v_head_dim);
    recurrent state: n_v_heads × k_head_dim × v_head_dim. Heads split across GPUs (tp must
    divide both head counts; vLLM ``gated_delta_net_state_shape``).
    """

    n_k_heads: int
    n_v_heads: int
    k_head_dim: int
    v_head_dim: int
    conv_kernel: int

    def __post_init__(self) -> None:
        _check_positive("linear-attention layer", n_k_heads=self.n_k_heads,
                        n_v_heads=self.n_v_heads, k_head_dim=self.k_head_dim,
                        v_head_dim=self.v_head_dim, conv_kernel=self.conv_kernel)

    @property
    def kind(self) -> LayerKind:
        return "gated_deltanet"

    def elements_per_token(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0

    def tokens_held(self, n_tokens: int) -> int:
        return 0

    def state_elements(self, tp: int = 1) -> int:
        return self.conv_elements(tp) + self.ssm_elements(tp)

    def conv_elements(self, tp: int = 1, width: int | None = None) -> int:
        """Convolution state on one GPU; ``width`` taps kept (vLLM: conv_kernel − 1)."""
        k_heads = split_evenly(self.n_k_heads, tp, "linear-attention key heads")
        v_heads = split_evenly(self.n_v_heads, tp, "linear-attention value heads")
        taps = self.conv_kernel - 1 if width is None else width
        return taps * (2 * k_heads * self.k_head_dim + v_heads * self.v_head_dim)

    def ssm_elements(self, tp: int = 1) -> int:
        """Recurrent state on one GPU: value heads × k_head_dim × v_head_dim."""
        v_heads = split_evenly(self.n_v_heads, tp, "linear-attention value heads")
        return v_heads * self.k_head_dim * self.v_head_dim


@dataclass(frozen=True)
class StatelessLayer:
    """A layer that keeps no per-sequence state (the MLP/MoE-only layers of Nemotron-H)."""

    @property
    def kind(self) -> LayerKind:
        return "none"

    def elements_per_token(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0

    def tokens_held(self, n_tokens: int) -> int:
        return 0

    def state_elements(self, tp: int = 1) -> int:
        _check_tp(tp)
        return 0


AnyLayer = Union[AttentionLayer, MLALayer, Mamba2Layer, GatedDeltaNetLayer, StatelessLayer]
