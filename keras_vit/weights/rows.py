"""Checkpoint key maps as data, and the one mover of tensors between key spaces.

A format's map is a list of `Row`s: our variable paths, their keys, how a
tensor is converted each way (`read`: theirs -> ours, `write`: ours ->
theirs) and when the row applies (a predicate of the `ViTConfig`). The
reader and the writer run the same rows (`move`), so what one writes the
other reads back. A key starting with ``?`` is optional: a row whose
tensors are not all there is skipped (a missing variable is then named by
`keras_vit.weights.assign_weights`).

The family's quirks are layouts here, each written once: `REGISTER_ROWS`
(DINOv2's registers take no position embedding), `MASK_TOKEN` (the masked
pre-training's token, dropped on reading, zero on writing) and `halves`
(a gated MLP's two projections, keras_vit's one SwiGLU ``fc1``).
"""

import dataclasses
from collections.abc import Callable

import numpy as np

from keras_vit.weights.assign import CheckpointError


def always(c):
    """The predicate of a row every model has."""
    return True


@dataclasses.dataclass(frozen=True)
class Row:
    """One or more tensors of ours <-> one or more of theirs.

    Attributes:
        ours: our variable paths (``"encoder_block_{i}/norm1/gamma"``).
        theirs: their keys (``"blocks.{i}.norm1.weight"``).
        read: ``(config, *theirs) -> ours``, a tuple of arrays.
        write: ``(config, *ours) -> theirs``, `read`'s inverse.
        when: ``config -> bool``: whether the model has these tensors.
    """

    ours: tuple
    theirs: tuple
    read: Callable
    write: Callable
    when: Callable = always

    def at(self, **names):
        """The row with ``{i}``, ``{n}``, ... in its keys filled in."""
        return dataclasses.replace(self, ours=tuple(k.format(**names) for k in self.ours),
                                   theirs=tuple(k.format(**names) for k in self.theirs))


def one(read, write):
    """A layout of one tensor each way: ``read(config, x)``, ``write(config, x)``."""
    return lambda c, x: (read(c, x),), lambda c, x: (write(c, x),)


SAME = one(lambda c, x: x, lambda c, x: x)
FLAT = one(lambda c, x: x.reshape(-1), lambda c, x: x)  # old files' (1, 1, 1, C) GroupNorms
LINEAR = one(lambda c, w: w.T, lambda c, k: k.T)  # torch (out, in) <-> (in, out)
CONV = one(lambda c, w: w.transpose(2, 3, 1, 0), lambda c, k: k.transpose(3, 2, 0, 1))  # OIHW <-> HWIO
TOKENS = one(lambda c, x: x.reshape(1, -1, x.shape[-1]), lambda c, x: x)  # (1, n, D)
# torch (H*hd, D) q/k/v weights <-> (D, H, hd); (D, H*hd) out weight <-> (H, hd, D); (H*hd,) <-> (H, hd)
HEADS_IN = one(lambda c, w: w.T.reshape(w.shape[1], c.num_heads, -1),
               lambda c, k: k.reshape(k.shape[0], -1).T)
HEADS_OUT = one(lambda c, w: w.T.reshape(c.num_heads, -1, w.shape[0]),
                lambda c, k: k.reshape(-1, k.shape[-1]).T)
HEADS_BIAS = one(lambda c, b: b.reshape(c.num_heads, -1), lambda c, b: b.reshape(-1))
# Keras Dense (D, D) projections (keras-hub's DINOv3) <-> (D, H, hd) and (H, hd, D)
DENSE_IN = one(lambda c, k: k.reshape(k.shape[0], c.num_heads, -1),
               lambda c, k: k.reshape(k.shape[0], -1))
DENSE_OUT = one(lambda c, k: k.reshape(c.num_heads, -1, k.shape[-1]),
                lambda c, k: k.reshape(-1, k.shape[-1]))


def fused(parts, layout):
    """`parts` projections stacked in one tensor (timm's ``qkv``, ``kv``;
    a torch ``in_proj``) <-> `parts` of ours, each in `layout`."""
    read, write = layout

    def split(c, x):
        return tuple(read(c, part)[0] for part in np.split(x, parts))

    def join(c, *xs):
        return (np.concatenate([write(c, x)[0] for x in xs]),)

    return split, join


def halves(layout, axis):
    """Two tensors of theirs (a gated MLP's gate and up projections, each in
    `layout`) <-> our one SwiGLU ``fc1``, ``[gate, up]`` along `axis`."""
    read, write = layout

    def join(c, gate, up):
        return (np.concatenate([read(c, gate)[0], read(c, up)[0]], axis),)

    def split(c, x):
        return tuple(write(c, half)[0] for half in np.split(x, 2, axis))

    return join, split


def _with_registers(c, table):
    zeros = np.zeros((1, c.num_registers, table.shape[-1]), table.dtype)
    return np.concatenate([table[:, :1], zeros, table[:, 1:]], axis=1)


# DINOv2 adds the position embeddings before the registers: its table has
# none of their rows, ours zero rows after the [class] token's.
REGISTER_ROWS = one(lambda c, t: _with_registers(c, TOKENS[0](c, t)[0]),
                    lambda c, t: np.concatenate([t[:, :1], t[:, 1 + c.num_registers:]], axis=1))
# The masked-image pre-training's token: not the image model's.
MASK_TOKEN = (lambda c, token: (), lambda c: (np.zeros((1, 1, c.hidden_dim), np.float32),))
# A tensor of theirs that is not the model's, dropped (never written).
DROP = (lambda c, x: (), lambda c: (None,))


def row(ours, theirs, layout=SAME, when=always):
    """A `Row` of one or more keys each side (a string is one key)."""
    as_tuple = (lambda k: (k,) if isinstance(k, str) else tuple(k))
    return Row(as_tuple(ours), as_tuple(theirs), *layout, when)


@dataclasses.dataclass(frozen=True)
class Style:
    """A format's leaf names: a layer's kernel and bias, a LayerNorm's scale and offset."""

    kernel: str
    bias: str
    gamma: str
    beta: str


FLAX = Style("/kernel", "/bias", "/scale", "/bias")
TORCH = Style(".weight", ".bias", ".weight", ".bias")
H5 = Style("/vars/0", "/vars/1", "/vars/0", "/vars/1")


def both(a, b):
    """The predicate of rows where `a` and `b` both hold."""
    return lambda c: a(c) and b(c)


def norm_rows(ours, theirs, style, layout=SAME, when=always):
    """A LayerNorm's two rows."""
    return [row(ours + "/gamma", theirs + style.gamma, layout, when),
            row(ours + "/beta", theirs + style.beta, layout, when)]


def dense_rows(ours, theirs, style, kernel=SAME, bias=SAME, when=always, has_bias=always):
    """A layer's kernel and (where `has_bias` too) bias rows; a `has_bias`
    of None makes the bias optional, there when the file or model has it."""
    optional = "?" if has_bias is None else ""
    return [row(ours + "/kernel", theirs + style.kernel, kernel, when),
            row(optional + ours + "/bias", optional + theirs + style.bias, bias,
                both(when, has_bias or always))]


def attention_rows(ours, theirs, names, style, kernels=(SAME, SAME), biases=(SAME, SAME), when=always,
              qkv_bias=always, key_bias=always, out_bias=always):
    """An attention layer's query, key, value and output projections (their
    `names`), with their kernel and bias layouts for the inputs and the
    output; a bias predicate of None: optional (`dense_rows`)."""
    bias_of = {"query": qkv_bias, "key": key_bias, "value": qkv_bias, "out": out_bias}
    rows = []
    for (ours_name, has_bias), theirs_name in zip(bias_of.items(), names):
        out = ours_name == "out"
        rows += dense_rows(f"{ours}/{ours_name}", theirs + theirs_name, style, kernels[out], biases[out],
                           when, has_bias)
    return rows


def blocks(rows, num_layers, name=lambda i: {"i": i}):
    """The block rows (keys with ``{i}``) of every block; `name` gives the
    format's fields of block i."""
    return [r.at(**name(i)) for i in range(num_layers) for r in rows]


class Mover:
    """Tensors taken out of one key space, so what nothing took is named.

    Args:
        arrays: key -> array.
        source: the file or model, for messages.
        leftover: the message for keys nothing took, with ``{keys}``.
    """

    def __init__(self, arrays, source, leftover):
        self.arrays, self.source, self.leftover = dict(arrays), source, leftover

    def take(self, key):
        """The array `key`, taken out; None for an absent optional ``?key``.

        Raises:
            CheckpointError: a required key is missing; the message names
                it and the keys not taken yet.
        """
        if key.startswith("?"):
            return self.arrays.pop(key[1:], None)
        if key not in self.arrays:
            left = sorted(self.arrays)
            raise CheckpointError(
                f"{self.source}: expected key '{key}' is missing."
                + (f" The keys not read yet: {left[:6]}"
                   + (f" and {len(left) - 6} more." if len(left) > 6 else ".") if left else ""))
        return self.arrays.pop(key)

    def finish(self):
        """Raises a `CheckpointError` naming the keys nothing took."""
        if self.arrays:
            raise CheckpointError(self.leftover.format(source=self.source, keys=sorted(self.arrays)[:12]))


def require_keys(arrays, keys, source):
    """Raises `Mover.take`'s `CheckpointError` for the first of `keys` not in `arrays`."""
    mover = Mover(arrays, source, "")
    for key in keys:
        if key not in arrays:
            mover.take(key)


READ_LEFTOVER = ("{source} has keys keras_vit does not know, so it would load only part of "
                 "the model: {keys}")


def move(rows, arrays, config, source, reading=True, leftover=READ_LEFTOVER):
    """`arrays` (theirs when `reading`, else ours) through `rows`: the
    rows that apply to `config` take their tensors, convert them and give
    the other side's; anything left over is refused (`leftover`).

    Returns:
        dict: key -> array, the other side's.
    """
    mover = Mover(arrays, source, leftover)
    out = {}
    for r in rows:
        if not r.when(config):
            continue
        keys, targets, convert = (r.theirs, r.ours, r.read) if reading else (r.ours, r.theirs, r.write)
        values = [mover.take(key) for key in keys]
        if any(value is None for value in values):
            continue
        out.update((target.lstrip("?"), value) for target, value
                   in zip(targets, convert(config, *values), strict=True) if value is not None)
    mover.finish()
    return out


def write_rows(rows, state, config, name, format):
    """`move` from a model's variables `state` to `format`'s keys; a
    variable no row takes is named (a writer missing a row)."""
    return move(rows, state, config, name, reading=False,
                leftover="{source}: the " + format + " writer has no key for {keys}.")
