"""Checkpoint key maps as data, and the one mover of tensors between key spaces.

A format's map is a list of `Row`s and its config a list of `Setting`s; the reader and the writer run the same
ones (`move`; `read_settings`, `write_settings`), so what one writes the other reads back. The family's quirks
are written once each: `REGISTER_ROWS` (DINOv2's registers take no position embedding), `MASK_TOKEN` (the
masked pre-training's token, dropped on reading, zero on writing), `halves` (a gated MLP's two projections,
our one SwiGLU ``fc1``, in `dense_rows`), `gated_mlp` and `dinov3_settings` (checked by `read_dinov3`).
"""

import collections
import dataclasses
from collections.abc import Callable

import numpy as np

from keras_vit.io.files import CheckpointError
from keras_vit.weights.checkpoint import require


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

    A key starting with ``?`` is optional: a row whose tensors are not all there is skipped
    (`keras_vit.assign_weights` names a variable left out).
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


def _heads(heads):
    """The layouts of an attention layer of ``heads(config)`` heads: torch (H*hd, D) q/k/v
    weights <-> (D, H, hd); (D, H*hd) out weight <-> (H, hd, D); (H*hd,) biases <-> (H, hd)."""
    return (one(lambda c, w: w.T.reshape(w.shape[1], heads(c), -1), lambda c, k: k.reshape(k.shape[0], -1).T),
            one(lambda c, w: w.T.reshape(heads(c), -1, w.shape[0]), lambda c, k: k.reshape(-1, k.shape[-1]).T),
            one(lambda c, b: b.reshape(heads(c), -1), lambda c, b: b.reshape(-1)))


HEADS_IN, HEADS_OUT, HEADS_BIAS = _heads(lambda c: c.num_heads)  # the blocks'
# the attention-pooling head's, of its own head count where it has one (PE's `pooling_num_heads`)
POOL_IN, POOL_OUT, POOL_BIAS = _heads(lambda c: c.pooling_num_heads or c.num_heads)
# Keras Dense (D, D) projections (keras-hub's DINOv3) <-> (D, H, hd) and (H, hd, D)
DENSE_IN = one(lambda c, k: k.reshape(k.shape[0], c.num_heads, -1), lambda c, k: k.reshape(k.shape[0], -1))
DENSE_OUT = one(lambda c, k: k.reshape(c.num_heads, -1, k.shape[-1]), lambda c, k: k.reshape(-1, k.shape[-1]))


def fused(parts, layout):
    """`parts` projections stacked in one tensor (timm's ``qkv``, ``kv``; a torch ``in_proj``) <-> `parts`
    of ours, each in `layout` (or a list: one layout per part)."""
    layouts = layout if isinstance(layout, list) else [layout] * parts

    def split(c, x):
        return tuple(read(c, part)[0] for (read, _), part in zip(layouts, np.split(x, parts), strict=True))

    def join(c, *xs):
        return (np.concatenate([write(c, x)[0] for (_, write), x in zip(layouts, xs, strict=True)]),)

    return split, join


def _even_first(head_dim):
    return np.concatenate([np.arange(0, head_dim, 2), np.arange(1, head_dim, 2)])


def even_first(layout):
    """`layout` with each head's dimensions (the last axis) in our rotary order, even ones first: theirs
    turn in interleaved pairs ``(2j, 2j + 1)`` (timm's Eva), ours in pairs ``(j, j + head_dim / 2)``
    (`keras_vit.layers.rope_angles`); the dot products are the same."""
    read, write = layout
    return (lambda c, x: (read(c, x)[0][..., _even_first(c.hidden_dim // c.num_heads)],),
            lambda c, x: write(c, x[..., np.argsort(_even_first(x.shape[-1]))]))


def halves(layout, axis):
    """Two tensors of theirs (a gated MLP's gate and up projections, each in `layout`) <-> our one SwiGLU
    ``fc1``, ``[gate, up]`` along `axis`."""
    read, write = layout

    def join(c, gate, up):
        return (np.concatenate([read(c, gate)[0], read(c, up)[0]], axis),)

    def split(c, x):
        return tuple(write(c, half)[0] for half in np.split(x, 2, axis))

    return join, split


def _with_registers(c, table):
    zeros = np.zeros((1, c.num_registers, table.shape[-1]), table.dtype)
    return np.concatenate([table[:, :1], zeros, table[:, 1:]], axis=1)


# DINOv2 adds the position embeddings before the registers: its table has none of their rows, ours zero
# rows after the [class] token's.
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


# A format's leaf names: a layer's kernel and bias, a LayerNorm's scale and offset
Style = collections.namedtuple("Style", ("kernel", "bias", "gamma", "beta"))
FLAX = Style("/kernel", "/bias", "/scale", "/bias")
TORCH = Style(".weight", ".bias", ".weight", ".bias")
H5 = Style("/vars/0", "/vars/1", "/vars/0", "/vars/1")


QKV = ("query", "key", "value")  # our attention layers' projections of the inputs
MAP = (lambda c: c.pooling == "map")  # the predicate of the attention-pooling head's rows


def both(a, b):
    """The predicate of rows where `a` and `b` both hold."""
    return lambda c: a(c) and b(c)


def _rms(c):
    return getattr(c, "norm_type", "layer_norm") == "rms_norm"


def norm_rows(ours, theirs, style, layout=SAME, when=always):
    """A norm's rows: a LayerNorm's two (gamma, beta), or with ``norm_type="rms_norm"`` an RMSNorm's one
    (``scale``, theirs as a gamma)."""
    return [row(ours + "/gamma", theirs + style.gamma, layout, both(when, lambda c: not _rms(c))),
            row(ours + "/beta", theirs + style.beta, layout, both(when, lambda c: not _rms(c))),
            row(ours + "/scale", theirs + style.gamma, layout, both(when, _rms))]


def dense_rows(ours, theirs, style, kernel=SAME, bias=SAME, when=always, has_bias=always):
    """A layer's kernel and (where `has_bias` too) bias rows; a `has_bias` of None makes the bias
    optional, there when the file or model has it. `theirs`: a layer's key, or a gated MLP's gate and up
    projections (a list, our one SwiGLU ``fc1`` by `halves`; a list of one: a layer)."""
    theirs, optional = [theirs] if isinstance(theirs, str) else theirs, "?" if has_bias is None else ""
    if len(theirs) == 2:
        kernel, bias = halves(kernel, -1), halves(bias, 0)
    return [row(ours + "/kernel", [key + style.kernel for key in theirs], kernel, when),
            row(optional + ours + "/bias", [optional + key + style.bias for key in theirs], bias,
                both(when, has_bias or always))]


def attention_rows(ours, theirs, names, style, kernels=(SAME, SAME), biases=(SAME, SAME), when=always,
              qkv_bias=always, key_bias=always, out_bias=always):
    """An attention layer's query, key, value and output projections (their `names`), with their kernel
    and bias layouts for the inputs and the output; a bias predicate of None: optional (`dense_rows`)."""
    bias_of = {"query": qkv_bias, "key": key_bias, "value": qkv_bias, "out": out_bias}
    return [row for (name, has_bias), theirs_name in zip(bias_of.items(), names)
            for row in dense_rows(f"{ours}/{name}", theirs + theirs_name, style, kernels[name == "out"],
                                  biases[name == "out"], when, has_bias)]


def block_rows(theirs, norms, attention, mlp, style, kernels, biases, mlp_layout, qkv_bias=None,
               key_bias=None, mlp_bias=None, scale=None, scale_when=always, out_bias=always):
    """One encoder block's rows, ours ``encoder_block_{i}/...``, theirs under `theirs`: its LayerNorms
    `norms`; its query, key, value and output projections `attention` (`attention_rows`, with `kernels` and
    `biases`); its MLP's layers `mlp` in `mlp_layout` (three: a gated MLP's gate and up projections, our
    SwiGLU ``fc1`` by `halves`, then its down projection); its LayerScales' key `scale` (with ``{j}``; None:
    none), where `scale_when`. Bias predicates of None: optional (`dense_rows`)."""
    ours = "encoder_block_{i}/"
    return [*norm_rows(ours + "norm1", theirs + norms[0], style),
            *attention_rows(ours + "attention", theirs, attention, style, kernels, biases,
                            qkv_bias=qkv_bias, key_bias=key_bias, out_bias=out_bias),
            *norm_rows(ours + "norm2", theirs + norms[1], style),
            *dense_rows(ours + "mlp/fc1", [theirs + name for name in mlp[:-1]], style, mlp_layout,
                        has_bias=mlp_bias),
            *dense_rows(ours + "mlp/fc2", theirs + mlp[-1], style, mlp_layout, has_bias=mlp_bias),
            *(row(f"{ours}layer_scale_{j}", theirs + scale.format(j=j), when=scale_when) for j in (1, 2) if scale)]


def blocks(rows, num_layers, name=lambda i: {"i": i}):
    """The block rows (keys with ``{i}``) of every block; `name` gives the format's fields of block i."""
    return [r.at(**name(i)) for i in range(num_layers) for r in rows]


def _missing(source, key, left):
    """The `CheckpointError` of a required `key` that is not there; `left`: the keys not read yet."""
    left = sorted(left)
    more = f" and {len(left) - 6} more." if len(left) > 6 else "."
    return CheckpointError(f"{source}: expected key '{key}' is missing."
                           + (f" The keys not read yet: {left[:6]}{more}" if left else ""))


def require_keys(arrays, keys, source):
    """Raises `move`'s `CheckpointError` for the first of `keys` not in `arrays`."""
    for key in keys:
        if key not in arrays:
            raise _missing(source, key, arrays)


READ_LEFTOVER = "{source} has keys keras_vit does not know, so it would load only part of the model: {keys}"


def move(rows, arrays, config, source, reading=True, leftover=READ_LEFTOVER):
    """`arrays` (theirs when `reading`, else ours) through `rows`: the rows that apply to `config` take
    their tensors (a required key that is missing is refused, naming it), convert them and give the other
    side's; anything left over is refused (`leftover`, with ``{source}`` and ``{keys}``).

    Returns:
        dict: key -> array, the other side's.
    """
    arrays, out = dict(arrays), {}
    for r in rows:
        if not r.when(config):
            continue
        keys, targets, convert = (r.theirs, r.ours, r.read) if reading else (r.ours, r.theirs, r.write)
        values = []
        for key in keys:
            if not key.startswith("?") and key not in arrays:
                raise _missing(source, key, arrays)
            values.append(arrays.pop(key.lstrip("?"), None))
        if any(value is None for value in values):
            continue
        out.update((target.lstrip("?"), value) for target, value
                   in zip(targets, convert(config, *values), strict=True) if value is not None)
    if arrays:
        raise CheckpointError(leftover.format(source=source, keys=sorted(arrays)[:12]))
    return out


def write_rows(rows, state, config, name, format):
    """`move` from a model's variables `state` to `format`'s keys; a variable no row takes is named (a
    writer missing a row)."""
    return move(rows, state, config, name, reading=False,
                leftover="{source}: the " + format + " writer has no key for {keys}.")


def never(c):
    """The predicate of a `Setting` read, not written: the format has no such key (its default read)."""
    return False


@dataclasses.dataclass(frozen=True)
class Setting:
    """One key of a format's config (Hugging Face's config.json, a keras-hub backbone's arguments, timm's
    model arguments) <-> one `ViTConfig` field, or several.

    Attributes:
        theirs: their key (``"hidden_size"``).
        ours: our field (``"hidden_dim"``), or a tuple of fields that `read` gives a tuple of values for
            (`activation`); None: a key written and not read (its reader's own code reads it, or nothing does).
        read: their value -> ours (``int``, ``float``, ``bool``, ...).
        default: their value where the config has no `theirs`; ``...``: the key is required.
        write: ``config -> their value``; None: the field's value.
        when: ``config -> bool``: whether the key is written.
    """

    theirs: str
    ours: str | None
    read: Callable = int
    default: object = ...
    write: Callable = None
    when: Callable = always


def required(settings):
    """The keys of `settings` that their config must have."""
    return tuple(s.theirs for s in settings if s.ours and s.default is ...)


def read_settings(settings, theirs, where):
    """Our `ViT` arguments of their config `theirs` (a dict) by `settings`.

    Raises:
        CheckpointError: a required key is absent; the message names it and `where` it came from
            (`keras_vit.weights.checkpoint.require`).
    """
    require(theirs, required(settings), where)
    ours = {}
    for s in settings:
        if s.ours:
            value = s.read(theirs.get(s.theirs, s.default))
            ours.update(zip(s.ours, value) if isinstance(s.ours, tuple) else [(s.ours, value)])
    return ours


def write_settings(settings, c):
    """Their config of a `ViTConfig` `c` by `settings`: key -> value."""
    return {s.theirs: s.write(c) if s.write else getattr(c, s.ours) for s in settings if s.when(c)}


def activation(key, names, default=...):
    """Their MLP activation's name `key` <-> our ``mlp_activation`` and ``gelu_approximate``, both ways by
    one table: `names` maps each of their names to our pair; a pair is written as the first name that maps
    to it. Its reader refuses a name not in `names` first, naming the ones there are."""
    written = {pair: name for name, pair in reversed(names.items())}  # the first name last, so it stays
    return Setting(key, ("mlp_activation", "gelu_approximate"), lambda name: names[name], default,
                   lambda c: written[(c.mlp_activation, c.gelu_approximate and c.mlp_activation == "gelu")])


def gated_mlp(key):
    """Their boolean `key` of a gated MLP <-> our ``mlp_activation``: ``"swiglu"``, else ``"gelu"``."""
    return Setting(key, "mlp_activation", lambda gated: "swiglu" if gated else "gelu", False,
                   lambda c: c.mlp_activation == "swiglu")


def dinov3_settings(names, key_bias):
    """DINOv3's settings in a format's `names`: its keys of the query, key, value and output biases (query
    and value: our ``qkv_bias``), the gated MLP and its activation; `key_bias`: the key bias's default. The
    output bias and the activation are written; `read_dinov3` checks them."""
    query, key, value, out, gated, activation = names
    return [Setting(query, "qkv_bias", bool, True),
            Setting(key, "key_bias", bool, key_bias, lambda c: c.qkv_bias and c.key_bias),
            Setting(value, None, write=lambda c: c.qkv_bias), Setting(out, None, write=lambda c: True),
            gated_mlp(gated),
            Setting(activation, None, write=lambda c: "silu" if c.mlp_activation == "swiglu" else "gelu")]


def read_dinov3(source, theirs, names, config):
    """Refuses in a DINOv3 config `theirs` (its keys `names`, as `dinov3_settings`') what keras_vit's DINOv3
    does not have: it has an output bias, query and value biases both or neither (ViT-7B), and a gated MLP
    with silu (SwiGLU) or a plain one with exact GELU. Without query and value biases the key has none
    either way: `config`'s ``key_bias`` is then True."""
    query_name, _, value_name, out_name, gated_name, activation_name = names
    query, value, out = (bool(theirs.get(name, True)) for name in (query_name, value_name, out_name))
    if query != value or not out:
        raise CheckpointError(
            f"{source}: {query_name}={query}, {value_name}={value}, {out_name}={out}; keras_vit's "
            "DINOv3 has an output bias, and query and value biases both or neither (ViT-7B).")
    is_gated, name = bool(theirs.get(gated_name, False)), theirs.get(activation_name, "gelu")
    if name != ("silu" if is_gated else "gelu"):
        raise CheckpointError(
            f"{source}: {activation_name} {name!r} with {gated_name}={is_gated}; keras_vit has "
            "DINOv3's gated MLP with silu (SwiGLU) and its plain MLP with gelu.")
    config["key_bias"] = config["key_bias"] or not config["qkv_bias"]
    config["gelu_approximate"] = False  # its plain MLP's GELU is the exact one
