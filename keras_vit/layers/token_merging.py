"""Token merging (ToMe: Bolya et al., "Token Merging: Your ViT But Faster",
ICLR 2023), step for step as the original code computes it
(facebookresearch/ToMe ``tome/merge.py``: ``bipartite_soft_matching``,
``merge_wavg``, ``merge_source``), in ``keras.ops`` with static shapes;
the blocks' counts are `keras_vit.config.merge_schedule` (``parse_r``).

Between a block's attention and its MLP, the ``r`` most similar pairs of
tokens are merged:

1. the tokens are split alternately into sets A (even positions) and B (odd
   positions);
2. each token of A is matched to its most similar token of B, by the cosine
   of their keys averaged over heads (the metric);
3. the ``r`` best-matched tokens of A are averaged into their match,
   weighted by the number of patches each holds (its size);
4. the result is A's other tokens (in order when there are prefix tokens,
   as ToMe keeps the [class] token first), then B's tokens.

The prefix tokens ([class], distillation, registers) are never merged, and
``r`` is capped at half of the other tokens. The sizes go on from block to
block; proportional attention adds ``log(size)`` to each key's logits.
"""

import math

import numpy as np
from keras import ops


def merged_count(tokens, r, num_prefix_tokens):
    """The tokens a block merges away from `tokens`: `r`, capped at half of
    the tokens that are not prefix tokens (ToMe's cap)."""
    return max(0, min(int(r), (int(tokens) - int(num_prefix_tokens)) // 2))


def bipartite_soft_matching(metric, r, num_prefix_tokens=0):
    """ToMe's matching of the ``T`` tokens' `metric` ``(batch, T, C)``.

    Set A is the tokens at even positions, B at odd ones; each token of A is
    matched to the token of B of highest cosine similarity, and the `r`
    pairs of highest similarity are merged. The first `num_prefix_tokens`
    tokens are neither merged nor merged into (ToMe's ``class_token`` and
    ``distill_token``: their rows, in A, and columns, in B, are -inf). No
    gradient flows through the metric.

    Args:
        metric: ``(batch, T, C)``.
        r: int, at most `merged_count` of ``T``.
        num_prefix_tokens: int.

    Returns:
        ``(kept, merged, into)``, one-hot float32 matrices (ToMe's
        ``unm_idx``, ``src_idx``, ``dst_idx``): ``(batch, ceil(T/2) - r,
        |A|)`` picks A's unmerged tokens, in order when there are prefix
        tokens (which thus come first), else most similar first;
        ``(batch, r, |A|)`` picks A's merged tokens, most similar first;
        ``(batch, r, |B|)`` the token of B each is merged into.
    """
    tokens = metric.shape[1]
    metric = ops.stop_gradient(ops.cast(metric, "float32"))
    metric = metric / ops.norm(metric, axis=-1, keepdims=True)
    a, b = _halves(metric)
    scores = ops.matmul(a, ops.swapaxes(b, 1, 2))  # (batch, |A|, |B|)
    if num_prefix_tokens:
        positions = np.arange(tokens)
        rows = positions[0::2] < num_prefix_tokens
        columns = positions[1::2] < num_prefix_tokens
        protected = np.logical_or(rows[:, None], columns[None, :])
        scores = ops.where(protected[None], float("-inf"), scores)
    # ToMe's max, argmax and descending argsort as comparisons, sums and
    # products, which every backend and exporter runs with a free batch size
    # (no sort, top-k, argmax or gather); ties go to the first index, as
    # torch's max and a stable sort
    best = ops.max(scores, axis=-1)                                          # node_max
    into_all = _first(ops.equal(scores, best[..., None]))                    # node_idx, one-hot
    ahead = ops.logical_or(ops.greater(best[:, None, :], best[:, :, None]),  # [i, j]: j before i
                           ops.logical_and(ops.equal(best[:, None, :], best[:, :, None]),
                                           np.tri(a.shape[1], k=-1, dtype=bool)[None]))
    rank = ops.sum(ops.cast(ahead, "int32"), axis=-1)                        # edge_idx's inverse
    merged = _positions(rank, 0, r)
    if num_prefix_tokens:  # in order, so that A's prefix tokens come first
        stays = ops.greater_equal(rank, r)                                   # (batch, |A|)
        before = ops.matmul(ops.cast(stays, "float32"),
                            np.triu(np.ones((a.shape[1],) * 2, "float32"), k=1))
        place = ops.where(stays, ops.cast(before, "int32"), -1)
        kept = _positions(place, 0, a.shape[1] - r)
    else:
        kept = _positions(rank, r, a.shape[1])
    return kept, merged, ops.matmul(merged, into_all)


def merge(x, matching, num_prefix_tokens=0):
    """Merges the tokens of `x` ``(batch, T, C)`` by `matching`
    (`bipartite_soft_matching`): each merged token of A is added into its
    token of B (ToMe's ``merge(x, mode="sum")``).

    Returns:
        ``(batch, T - r, C)``: the prefix tokens in their order, A's
        unmerged tokens, B's tokens.
    """
    kept, merged, into = (ops.cast(m, x.dtype) for m in matching)
    a, b = _halves(x)
    # the gathers and ToMe's scatter_reduce("sum") as one-hot products,
    # exact in float32
    unmerged = ops.matmul(kept, a)
    b = b + ops.matmul(ops.swapaxes(into, 1, 2), ops.matmul(merged, a))
    if not num_prefix_tokens:
        return ops.concatenate([unmerged, b], axis=1)
    in_a, in_b = math.ceil(num_prefix_tokens / 2), num_prefix_tokens // 2
    prefix = [unmerged[:, i // 2:i // 2 + 1] if i % 2 == 0 else b[:, i // 2:i // 2 + 1]
              for i in range(num_prefix_tokens)]
    return ops.concatenate([*prefix, unmerged[:, in_a:], b[:, in_b:]], axis=1)


def merge_weighted_average(x, sizes, matching, num_prefix_tokens=0):
    """ToMe's ``merge_wavg``: `x` ``(batch, T, C)`` merged by `matching` as
    averages weighted by `sizes` ``(batch, T, 1)`` (float32; None: ones, each
    token one patch).

    Returns:
        ``(x, sizes)``: ``(batch, T - r, C)`` and ``(batch, T - r, 1)``.
    """
    if sizes is None:
        sizes = unit_sizes(x)
    total = merge(x * ops.cast(sizes, x.dtype), matching, num_prefix_tokens)
    sizes = merge(sizes, matching, num_prefix_tokens)
    return total / ops.cast(sizes, x.dtype), sizes


def unit_sizes(x):
    """ToMe's sizes before any merge: ``(batch, T, 1)`` ones (float32), each
    token of `x` ``(batch, T, C)`` one patch."""
    return ops.ones_like(ops.cast(x[..., :1], "float32"))


def initial_sources(tokens, like):
    """ToMe's source tracking's start: ``(batch, T, T)``, each token holding
    itself (the batch size of `like`, ``(batch, ...)``)."""
    eye = ops.eye(tokens, dtype="float32")[None]
    return ops.repeat(eye, ops.shape(like)[0], axis=0)


def _first(mask):
    """float32 one-hot of `mask`'s first True along the last axis."""
    count = ops.cast(mask, "float32")
    size = mask.shape[-1]
    earlier = ops.matmul(count, np.triu(np.ones((size, size), "float32"), k=1))  # Trues before each
    return ops.cast(ops.logical_and(mask, ops.equal(earlier, 0)), "float32")


def _positions(rank, start, stop):
    """float32 ``(batch, stop - start, n)``: row ``p`` one-hot at the index
    whose `rank` ``(batch, n)`` is ``start + p``."""
    wanted = np.arange(start, stop, dtype="int32")[None, :, None]
    return ops.cast(ops.equal(ops.cast(rank, "int32")[:, None, :], wanted), "float32")


def _halves(x):
    """Sets A and B of `x` ``(batch, T, ...)``: the even and odd positions."""
    return x[:, 0::2], x[:, 1::2]
