"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as one Keras model.

    z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos           (Eq. 1)
    z'_l = MSA(LN(z_{l-1})) + z_{l-1},        l = 1..L        (Eq. 2)
    z_l = MLP(LN(z'_l)) + z'_l,               l = 1..L        (Eq. 3)
    y = LN(z_L^0)                                             (Eq. 4)

then the head (a linear layer, optionally after a tanh "pre-logits" layer).
The architecture is a `keras_vit.ViTConfig`; the input checks are in
`keras_vit.input_checks`, the copies at another size (`with_*`) and LoRA merging in
`keras_vit.variants`.
"""

import dataclasses
import numbers

import keras

from keras_vit import input_checks
from keras_vit import layers as vit_layers
from keras_vit import variants
from keras_vit.config import FIELDS
from keras_vit.config import constructor_config
from keras_vit.kernels.projection import has_dora
from keras_vit.layers.position_embedding import grid_positions
from keras_vit.layers.position_embedding import RESAMPLE_METHODS
from keras_vit.layers.position_embedding import grid_shapes
from keras_vit.layers import token_merging
from keras_vit.presets import preset_config
from keras_vit.released import PRETRAINED
from keras_vit.released import default_pretrained
from keras_vit.weights import load_checkpoint
from keras_vit.weights import save_checkpoint

def block_names(num_layers):
    """``encoder_block_0`` ... ``encoder_block_{L-1}``."""
    return [f"encoder_block_{i}" for i in range(num_layers)]


def default_feature_layers(num_layers):
    """The blocks `ViT.feature_model` reads by default: DINOv3's four evenly
    spaced blocks ending at the last (``FOUR_EVEN_INTERVALS`` of DINOv3's
    dense evaluations, Siméoni et al., 2025).

    Block ``k * L // 4 - 1`` for ``k = 1..4`` of ``L`` blocks: 2, 5, 8, 11
    of 12; 9, 19, 29, 39 of 40; 0, 1, 2, 3 of 4. Of 24 blocks 4, 11, 17, 23,
    the ViT-L blocks of the DINOv3 paper, which DINOv3's code writes out in
    place of the even 5, 11, 17, 23. Fewer than 4 blocks: every block.

    Args:
        num_layers: int, the model's blocks ``L``.

    Returns:
        A tuple of block indices, ascending.

    Example:
        >>> default_feature_layers(12), default_feature_layers(24), default_feature_layers(2)
        ((2, 5, 8, 11), (4, 11, 17, 23), (0, 1))
    """
    if num_layers < 4:
        return tuple(range(num_layers))
    if num_layers == 24:
        return (4, 11, 17, 23)
    return tuple(k * num_layers // 4 - 1 for k in range(1, 5))


def feature_layers(layers, num_layers):
    """The block indices `ViT.feature_model` reads for its `layers` argument,
    ascending and each once.

    None: `default_feature_layers`. An int ``n``: the last ``n`` blocks, as
    timm's ``forward_intermediates(indices=n)`` and DINO's
    ``get_intermediate_layers(x, n)``. A sequence: those indices, negative
    ones counting from the end.
    """
    if layers is None:
        return default_feature_layers(num_layers)
    if isinstance(layers, numbers.Integral) and not isinstance(layers, bool):
        if not 1 <= layers <= num_layers:
            raise ValueError(
                f"layers={layers} asks for the last {layers} blocks of a model of {num_layers}: "
                f"give a number from 1 to {num_layers}, or block indices as a list.")
        return tuple(range(num_layers - int(layers), num_layers))
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError(
            f"layers must be None, an int (the last n blocks) or a list of block indices; got "
            f"{layers!r}. Give for instance layers=4 or layers=[2, 5, 8, 11].")
    indices = list(layers)
    if not indices:
        raise ValueError(
            "layers=[] asks for no block: give at least one block index, or leave layers at "
            "None for DINOv3's four blocks.")
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(
                f"layers holds {index!r}, which is not a block index: give ints from "
                f"{-num_layers} to {num_layers - 1} (negative ones count from the end).")
        if not -num_layers <= index < num_layers:
            raise ValueError(
                f"layers holds block {index}, but the model has {num_layers} blocks: give indices "
                f"from 0 to {num_layers - 1}, or from -{num_layers} to -1 counting from the end.")
    return tuple(sorted({int(index) % num_layers for index in indices}))


@dataclasses.dataclass(frozen=True)
class ViTParts:
    """The layers of a `ViT`, by role, in the order `forward` applies them.

    A family option's layer is None where the config has it off: ``resnet``
    (hybrids, Sec. 3.1), ``patch_corruption`` (masked patch prediction, Sec.
    4.6), ``registers`` (DINOv2), ``distillation_token`` and the
    ``distillation_*`` / ``head_dist`` layers (DeiT), ``class_token`` (off
    with average or MAP pooling), ``patch_norm`` (AIMv2), ``norm_pre`` (CLIP), ``encoder_norm`` (off
    with ``fc_norm``), ``pooling`` (off with ``pooling="none"``),
    ``pre_logits`` (``representation_size``), ``projection``
    (``projection_dim``: CLIP's image projection), ``normalize``
    (``normalize_features``: the L2 norm of a zero-shot classifier) and
    ``head`` (``num_classes=0``), ``prompts`` (VPT's, ``prompt_tokens``). The norms are LayerNorms, or RMSNorms
    with ``norm_type="rms_norm"`` (`keras_vit.layers.normalization`).
    Each layer keeps its name in the functional graph (``patch_embedding``,
    ``encoder_block_{i}``, ...), which the checkpoint mappings use.
    """

    patch_embedding: vit_layers.PatchEmbedding            # x_p E
    position_embedding: vit_layers.PositionEmbedding      # + E_pos
    embedding_dropout: keras.layers.Dropout
    blocks: tuple                                         # Eq. 2-3, TransformerEncoder each
    resnet: vit_layers.ResNetStem | None = None
    patch_corruption: keras.layers.Layer | None = None
    registers: vit_layers.ClassToken | None = None
    distillation_token: vit_layers.ClassToken | None = None
    class_token: vit_layers.ClassToken | None = None
    patch_norm: keras.layers.Layer | None = None
    norm_pre: keras.layers.Layer | None = None
    encoder_norm: keras.layers.Layer | None = None              # LN of Eq. 4
    pooling: keras.layers.Layer | None = None
    fc_norm: keras.layers.Layer | None = None
    pre_logits: keras.layers.Dense | None = None
    projection: keras.layers.Dense | None = None
    normalize: keras.layers.UnitNormalization | None = None
    head: keras.layers.Dense | None = None
    distillation_pooling: vit_layers.TokenPooling | None = None
    head_dist: keras.layers.Dense | None = None
    distillation_average: keras.layers.Average | None = None
    prompts: vit_layers.VisualPrompts | None = None

    @property
    def prefix_tokens(self):
        """The token layers, in the order they are prepended: the sequence
        reads ``[x_class; x_distill; registers; patches]``."""
        return tuple(layer for layer in (self.registers, self.distillation_token,
                                         self.class_token) if layer is not None)


def _embedding_layers(c, dtype, norm):
    """Eq. 1's layers of config `c`: the stem, the patch embedding, the
    prefix tokens, the position embedding, its dropout, CLIP's pre-norm."""
    made = {}
    if c.resnet_block_units is not None:
        made["resnet"] = vit_layers.ResNetStem(c.resnet_block_units, c.resnet_width_factor,
                                               c.data_format, dtype=dtype, name="resnet")
    made["patch_embedding"] = vit_layers.PatchEmbedding(
        c.hidden_dim, c.patch_size, c.data_format, use_bias=c.patch_bias, dtype=dtype,
        name="patch_embedding")
    if c.patch_norm:  # AIMv2
        made["patch_norm"] = vit_layers.normalization(**norm, name="patch_norm")
    if c.num_registers:
        made["registers"] = vit_layers.ClassToken(c.num_registers, dtype=dtype, name="registers")
    if c.distillation:  # DeiT: [x_class; x_distill; ...]
        made["distillation_token"] = vit_layers.ClassToken(1, dtype=dtype,
                                                           name="distillation_token")
    if c.uses_class_token:
        made["class_token"] = vit_layers.ClassToken(1, dtype=dtype, name="class_token")
    made["position_embedding"] = vit_layers.PositionEmbedding(
        c.grid_size, c.num_prefix_tokens, c.position_table, dtype=dtype,
        name="position_embedding")
    made["embedding_dropout"] = keras.layers.Dropout(c.dropout_rate, dtype=dtype,
                                                     name="embedding_dropout")
    if c.norm_pre:  # CLIP
        made["norm_pre"] = vit_layers.normalization(**norm, name="norm_pre")
    if c.prompt_tokens:  # VPT: [prefix; prompts; patches], after E_pos
        made["prompts"] = vit_layers.VisualPrompts(
            c.prompt_tokens, c.num_layers if c.deep_prompts else 1, c.num_prefix_tokens,
            c.prompt_dropout, vit_layers.vpt_initializer(c.patch_size, c.hidden_dim), dtype=dtype,
            name="prompts")
    return made


def _head_layers(c, dtype, norm):
    """The layers of config `c` after the encoder: pooling, fc_norm,
    pre-logits, projection, the heads and DeiT's average."""
    made = {}
    if c.pooling == "map":
        made["pooling"] = vit_layers.MultiHeadAttentionPooling(
            c.pooling_num_heads or c.num_heads, c.pooling_mlp_dim or c.mlp_dim, c.layer_norm_epsilon, c.gelu_approximate, c.mlp_activation,
            norm_bias=c.norm_bias, norm_type=c.norm_type, dtype=dtype, name="pooling")
    elif c.pooling != "none":
        made["pooling"] = vit_layers.TokenPooling(c.pooling, c.num_prefix_tokens, dtype=dtype,
                                                  name="pooling")
    if c.fc_norm:  # timm: the final LayerNorm after pooling
        made["fc_norm"] = vit_layers.normalization(**norm, name="fc_norm")
    if c.distills_by_head:
        made["distillation_pooling"] = vit_layers.TokenPooling(
            "distillation", c.num_prefix_tokens, dtype=dtype, name="distillation_pooling")
    if c.representation_size:
        made["pre_logits"] = keras.layers.Dense(
            c.representation_size, activation="tanh", kernel_initializer="glorot_uniform",
            dtype=dtype, name="pre_logits")
    if c.projection_dim:  # CLIP's visual_projection
        made["projection"] = keras.layers.Dense(c.projection_dim, use_bias=False, dtype=dtype,
                                                name="projection")
    if c.normalize_features:
        made["normalize"] = keras.layers.UnitNormalization(dtype=dtype, name="normalize")
    if c.num_classes:
        made["head"] = keras.layers.Dense(
            c.num_classes, kernel_initializer="zeros",
            bias_initializer=keras.initializers.Constant(c.head_bias_init), dtype=dtype,
            name="head")
    if c.distills_by_head:  # DeiT averages its two heads' logits (or the two tokens, headless)
        if c.num_classes:
            made["head_dist"] = keras.layers.Dense(c.num_classes, kernel_initializer="zeros",
                                                   dtype=dtype, name="head_dist")
        made["distillation_average"] = keras.layers.Average(dtype=dtype,
                                                            name="distillation_average")
    return made


def block_arguments(config, index):
    """The `keras_vit.layers.TransformerEncoder` arguments of block `index`
    (0-based) of the `ViT` of `config`: its `block_options`, and the block's
    own settings: the dropout rates, the stochastic-depth rate growing
    linearly from 0 at the first block to ``drop_path_rate`` at the last, and
    token merging (the block's count, the prefix tokens it leaves alone)."""
    return dict(
        options=config.block_options, dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        drop_path_rate=config.drop_path_rate * index / max(config.num_layers - 1, 1),
        token_merging=config.merge_counts[index], num_prefix_tokens=config.num_prefix_tokens,
        proportional_attention=config.proportional_attention,
    )


def build_layers(config, dtype=None):
    """The `ViTParts` of the `ViT` of `config`, each layer made with its name
    (in the order of Eq. 1-4, which is also the order their seeds are drawn)."""
    c = config
    norm = dict(**c.block_options.norm_arguments, dtype=dtype)  # the blocks' norms, and the model's
    made = _embedding_layers(c, dtype, norm)                   # Eq. 1
    made["blocks"] = tuple(
        vit_layers.TransformerEncoder(**block_arguments(c, i), dtype=dtype, name=name)
        for i, name in enumerate(block_names(c.num_layers)))
    if c.final_norm and not c.fc_norm:
        made["encoder_norm"] = vit_layers.normalization(**norm, name="encoder_norm")
    made.update(_head_layers(c, dtype, norm))                  # Eq. 4 and the heads
    return ViTParts(**made)


def forward(parts, images, training=None, record=None, corruption=None, class_only=False,
            resample_method=None):
    """Eq. 1-4 over `parts` (a `ViTParts`), in four steps: NaFlex's inputs
    taken apart (`_naflex_arguments`), the embeddings (`_embed`, Eq. 1), the
    blocks (`_encode`, Eq. 2-3), then the pooling and the heads (`_head`,
    Eq. 4).

    Args:
        parts: the model's `ViTParts`.
        images: ``(batch, H, W, C)`` (or channels first); or NaFlex's dict
            (`keras_vit.naflex_inputs`): the flattened ``"patches"`` are
            embedded, the position embeddings follow each image's grid
            (``"spatial_shapes"``), the attention and the pooling leave the
            padding out (``"patch_mask"``).
        training: bool or None.
        record: None, or a dict that receives every stage (`ViT.intermediates`).
        corruption: ``(codes, replacement)``, the inputs of
            ``parts.patch_corruption`` (masked patch prediction, Sec. 4.6).
        class_only: the last block updates the [class] token alone (with
            DeiT's distillation token; its queries attend to every token).
            Eq. 4 reads only z_L^0, so with token pooling the logits are the
            same for 85% less of a block's work (`ViT.call`).
        resample_method: None, or one of
            `keras_vit.layers.position_embedding.RESAMPLE_METHODS`: `images`
            of any height and width (multiples of the patch size), the
            position embeddings resampled in the graph to their patch grid
            by that method, as `ViT.with_image_size` resamples them, or
            rotary ones turned on that grid (what
            ``ViT.export(..., dynamic_image_size=True)`` traces).

    Returns:
        What the last layer gives: logits ``(batch, classes)``, features, or
        the tokens.
    """
    x, naflex, pooled = _naflex_arguments(parts, images)
    x, rotary = _embed(parts, x, training, corruption, resample_method, naflex)
    if record is not None:
        record["embeddings"] = x
    x = _encode(parts, x, training, record, class_only, {**naflex, **rotary})
    return _head(parts, x, record, pooled)


def _naflex_arguments(p, images):
    """``(x, blocks, pooling)``: what the patch embedding takes of `images`,
    and NaFlex's arguments of the blocks (``spatial_shapes``, ``key_mask``)
    and of the pooling (its mask of the padding); ``{}`` for an image batch."""
    if not isinstance(images, dict):
        return images, {}, {}
    patch_mask = images["patch_mask"]
    key_mask = keras.ops.pad(patch_mask, [[0, 0], [p.position_embedding.num_prefix_tokens, 0]],
                             constant_values=1)  # the prefix tokens attended to
    pooled = {}
    if isinstance(p.pooling, vit_layers.MultiHeadAttentionPooling):
        pooled = {"key_mask": key_mask}
    elif getattr(p.pooling, "mode", None) == "gap":
        pooled = {"patch_mask": patch_mask}
    return images["patches"], {"spatial_shapes": images["spatial_shapes"], "key_mask": key_mask}, pooled


def _embed(p, x, training, corruption, resample_method, naflex):
    """Eq. 1, ``z_0 = [x_class; x_p E] + E_pos`` (after the ResNet stem,
    with the patch norm, corruption, dropout and ``norm_pre`` of the model),
    and the blocks' rotary grid for images of any size (``{}`` otherwise)."""
    if p.resnet is not None:
        x = p.resnet(x)
    placed, rotary = {}, {}  # for images of any size: the position embedding's grid, the blocks'
    if resample_method is None:
        x = p.patch_embedding(x)                              # x_p E
    else:
        embedding = p.patch_embedding
        placed = {"grid": grid_positions(x, embedding.patch_size, embedding.data_format),
                  "resample_method": resample_method}
        x = embedding.token_map(x)  # flattened with -1: jax2onnx maps no product of free sizes
        x = keras.ops.reshape(x, (keras.ops.shape(x)[0], -1, x.shape[-1]))
        if p.blocks[0].options.rope is not None:  # each block turns queries and keys on this grid
            rotary = {"spatial_shapes": grid_shapes(*placed["grid"], x)}
    if p.patch_norm is not None:
        x = p.patch_norm(x)
    if p.patch_corruption is not None:                        # Sec. 4.6
        x = p.patch_corruption(x, *corruption)
    for token in p.prefix_tokens:
        x = token(x)                                          # [x_class; ...]
    if naflex:
        x = p.position_embedding(x, spatial_shapes=naflex["spatial_shapes"])
    else:
        x = p.position_embedding(x, **placed)                 # + E_pos
    x = p.embedding_dropout(x, training=training)
    if p.norm_pre is not None:
        x = p.norm_pre(x)
    if p.prompts is not None:
        x = p.prompts(x, training=training)                   # VPT: [prefix; P; patches]
    return x, rotary


def _encode(p, x, training, record, class_only, arguments):
    """Eq. 2-3: the blocks in turn, each given `arguments` (NaFlex's,
    rotary grids) and token merging's sizes (with `record`, its sources too)
    from the block before; each block's attention weights and tokens into
    `record`."""
    merging = {}  # token merging (ToMe): the tokens' sizes once merged; with `record`, sources
    if record is not None and any(block.token_merging for block in p.blocks):
        merging["token_sources"] = token_merging.initial_sources(x.shape[1], x)
    for i, block in enumerate(p.blocks):                      # Eq. 2-3
        if i and p.prompts is not None and p.prompts.depth > 1:  # VPT-deep: block i's own prompts
            x = p.prompts(x, block=i, training=training)
        last = class_only and record is None and i == len(p.blocks) - 1
        queries = 1 + (p.distillation_token is not None) if last else None  # the tokens read
        outputs = block(x, training=training, num_queries=queries,
                        return_attention_scores=record is not None, **arguments, **merging)
        x, *outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        if block.merges(queries):                             # ToMe, after the attention
            merging["token_sizes"], *outputs = outputs
            if "token_sources" in merging:
                merging["token_sources"], *outputs = outputs
        if record is not None:
            record[f"attention_{i}"], record[block.name] = outputs[0], x
    if "token_sources" in merging:
        record["token_sources"] = merging["token_sources"]
    return x


def _head(p, x, record, pooled):
    """Eq. 4 and the heads: the encoder norm, the pooling (given `pooled`,
    NaFlex's mask), ``fc_norm``, pre-logits, projection, normalisation and
    the head (DeiT's two averaged); the stages into `record`."""
    if p.encoder_norm is not None:
        x = p.encoder_norm(x)                                 # LN, Eq. 4
    if p.prompts is not None:  # VPT: the pooling reads the prefix and the patches alone
        start = p.prompts.num_prefix_tokens
        x = keras.ops.concatenate([x[:, :start], x[:, start + p.prompts.num_tokens:]], axis=1)
    if record is not None:
        record["encoded"] = x
    tokens = x
    if p.pooling is not None:
        x = p.pooling(x, **pooled)                            # y
    for layer in (p.fc_norm, p.pre_logits, p.projection, p.normalize):
        if layer is not None:
            x = layer(x)
    if record is not None:
        record["features"] = x
    if p.distillation_average is not None:                    # DeiT: two tokens, two heads
        distilled = p.distillation_pooling(tokens)
        if p.head is not None:
            x, distilled = p.head(x), p.head_dist(distilled)
        x = p.distillation_average([x, distilled])
    elif p.head is not None:
        x = p.head(x)
    if record is not None:
        record["logits" if p.head is not None else "features"] = x
    return x


@keras.saving.register_keras_serializable(package="keras_vit")
class ViT(keras.Model):
    """Vision Transformer: image in, logits (or features) out.

    The model of "An Image is Worth 16x16 Words" as a functional Keras model:
    it trains with ``fit``, saves to ``.keras``, quantizes
    (``model.quantize``), takes LoRA (`enable_lora`) and exports
    (``model.export``) on TensorFlow, JAX and PyTorch. Defaults are ViT-B/16
    at 224 px, initialised as the original code (zero head kernel and
    [class] token, normal(0.02) position embeddings, Xavier-uniform kernels).

    Args:
        config: a `keras_vit.ViTConfig`, or None for one of the keyword
            arguments; keyword arguments given with a config replace its fields.
        dtype: a dtype policy such as ``"mixed_bfloat16"``, or a
            ``keras.dtype_policies.DTypePolicyMap`` of policies by layer path
            (quantized ones such as ``"int8_from_float32"``: a quantized
            model whose weights are then loaded), as keras-hub's backbones take.
        **kwargs: `keras_vit.ViTConfig` fields (``image_size``,
            ``patch_size``, ``num_layers``, ...), and Keras's ``name`` and
            ``trainable``.

    Input shape: ``(batch, H, W, C)`` (or ``(batch, C, H, W)``); with
        ``naflex=True``, NaFlex's dict of images of any size
        (`keras_vit.naflex_inputs`: ``"patches"``, ``"patch_mask"``,
        ``"spatial_shapes"``; docs/naflex.md).
    Output shape: ``(batch, num_classes)``; ``(batch, features)`` when
        ``num_classes=0``; ``(batch, tokens, D)`` with ``pooling="none"``.

    The layers are ``model.parts`` (a `ViTParts`), by role. In the
    functional graph every layer's output is what its name says
    (``encoder_block_{i}``, ``encoder_norm``: the whole token sequence);
    running the model with token pooling, the last block updates the [class]
    token alone (`call`'s ``class_only``): the same logits for less work.

    Example:
        >>> import numpy as np
        >>> model = ViT.from_preset("vit_ti16", num_classes=10, image_size=32, patch_size=4)
        >>> tuple(model(np.zeros((2, 32, 32, 3))).shape)
        (2, 10)
    """

    def __init__(self, config=None, dtype=None, **kwargs):
        dtype, policy_map = variants.split_policy_map(dtype)
        config = constructor_config("ViT", config, kwargs)
        parts = build_layers(config, dtype)
        if config.naflex:  # NaFlex (keras_vit.naflex): a dict of patches, mask and grids
            # sequences of any length up to max_num_patches (a length per batch in training)
            images = {name: keras.Input(shape=(None, *shape[1:]) if name != "spatial_shapes" else shape,
                                        name=name, dtype="float32" if name == "patches" else "int32")
                      for name, shape in config.naflex_input_shapes.items()}
        else:
            images = keras.Input(shape=config.input_shape, name="images")
        kwargs.setdefault("name", "vit")
        super().__init__(images, forward(parts, images), dtype=dtype, **kwargs)
        self.config = config
        self.parts = parts
        for field in FIELDS:  # model.image_size, model.num_classes, ...
            setattr(self, field, getattr(config, field))
        if config.class_names is not None:
            self.class_names = list(config.class_names)
        self.grid_size = config.grid_size
        self.num_prefix_tokens = config.num_prefix_tokens
        # Functional models drop `dtype`: the layers' policy is the model's (this
        # is also what makes `compile` add loss scaling under mixed_float16).
        self.dtype_policy = parts.patch_embedding.dtype_policy
        variants.apply_policy_map(self, policy_map)

    def call(self, images, training=None, mask=None, class_only=None, resample_method=None):
        """The functional graph's computation, eagerly or traced.

        `class_only`: the last block updates the [class] (and distillation)
        token alone, the only rows token pooling reads (`forward`): the same
        logits for 7% fewer FLOPs (docs/performance.md). None: where the
        model has token pooling. False: every token, as the functional graph
        (``keras.Model(model.input, model.output)``) computes them.

        `resample_method`: None, or one of ``"bilinear"``, ``"bicubic"``,
        ``"dinov2"``, ``"cpe"``: `images` of any height and width, multiples of the
        patch size, the position embeddings resampled in the graph to their
        patch grid as ``with_image_size(..., method=resample_method)``
        resamples them (`forward`); what ``export(...,
        dynamic_image_size=True)`` traces (`keras_vit.export.serving.AnyImageSize`).
        """
        if resample_method is None:
            input_checks.check_images(self, images)  # JAX's trainer calls `call`, not `__call__`
        elif resample_method not in RESAMPLE_METHODS:
            raise ValueError(f"resample_method={resample_method!r} is not one of {RESAMPLE_METHODS}.")
        if class_only is None:
            class_only = self.config.pooling == "token"
        elif class_only and self.config.pooling != "token":
            raise ValueError(
                f"class_only=True needs token pooling, which reads only the [class] token; "
                f"this model pools with {self.config.pooling!r}, which reads every token. "
                "Leave class_only at None.")
        return forward(self.parts, images, training, class_only=class_only,
                       resample_method=resample_method)

    def compute_output_spec(self, images, training=None, mask=None):
        """The output's ``KerasTensor`` for images given as arrays, tensors
        or ``KerasTensor``s (`keras_vit.input_checks.symbolic`)."""
        return super().compute_output_spec(input_checks.symbolic(images), training, mask)

    def intermediates(self, images, training=False):
        """Every stage of the model on `images`, run eagerly, in a dict:
        ``"embeddings"`` (z_0, Eq. 1), ``"encoder_block_{i}"`` (z_l),
        ``"attention_{i}"`` (``(batch, heads, tokens, tokens)``), ``"encoded"``
        (LN(z_L)), ``"features"`` (y) and ``"logits"``; the values of
        ``model(images)``. With VPT's prompts (`with_prompts`) the blocks'
        tokens and attention weights hold them, after the prefix tokens;
        ``"encoded"`` leaves them out, as the pooling does."""
        input_checks.check_images(self, images)
        record = {}
        forward(self.parts, images, training, record)
        return record

    def feature_model(self, layers=None, norm=True, prefix_tokens=False):
        """A functional model from this model's images to the dense features
        of some of its blocks: each block's patch tokens as a map over the
        patch grid, as DINO's ``get_intermediate_layers(x, n, reshape=True,
        norm=...)`` (DINOv2, DINOv3) and timm's ``forward_intermediates``
        give them.

        The model is built from this model's functional graph (the output of
        ``encoder_block_{i}``, the whole sequence), so it shares this
        model's layers and weights (quantization and LoRA on this model
        carry over) and runs the blocks up to the last one asked for, no
        further. Its only layers of its own are a `TokenMap` per block read
        (``encoder_block_{i}_map``). It trains, saves to ``.keras``
        (reloading with ``keras.saving.load_model``) and exports as a
        Keras model: inside `keras_vit.kernels.keras_layers_only` with an
        ``input_signature`` whose batch is None, as `export` does, and on
        PyTorch to ONNX with `keras_vit.export.pytorch.torch_onnx`.

        Args:
            layers: which blocks. None: DINOv3's four evenly spaced blocks
                ending at the last (`default_feature_layers`: 2, 5, 8, 11 of
                12; 4, 11, 17, 23 of 24). An int ``n``: the last ``n``
                blocks, as timm and DINO read an int. A list of block
                indices, negative ones counting from the end.
            norm: apply the final LayerNorm of Eq. 4 (``encoder_norm``, its
                weights shared) to each block's tokens, as DINO's
                ``norm=True``. A model whose final LayerNorm normalizes the
                pooled features instead (``fc_norm=True``) has no such
                LayerNorm: it takes ``norm=False`` only, and says so.
            prefix_tokens: also give each block's prefix tokens ([class],
                distillation token, registers, in the sequence's order; then
                VPT's prompts, with `with_prompts`).

        Returns:
            A ``keras.Model`` whose output is a dict: ``"encoder_block_{i}"``
            ``(batch, grid_h, grid_w, hidden_dim)`` (``(batch, hidden_dim,
            grid_h, grid_w)`` channels first) for each block ``i`` read, and
            with `prefix_tokens` ``"encoder_block_{i}_prefix"``
            ``(batch, num_prefix_tokens, hidden_dim)``.

        Example:
            ```python
            import numpy as np
            from keras_vit import ViT

            model = ViT(image_size=32, patch_size=8, num_layers=4, num_heads=2, hidden_dim=16,
                        mlp_dim=32, num_classes=0, num_registers=4)
            features = model.feature_model(prefix_tokens=True)
            out = features(np.zeros((2, 32, 32, 3), "float32"))
            print(sorted(out))   # -> ['encoder_block_0', 'encoder_block_0_prefix', ...]
            print(tuple(out["encoder_block_3"].shape), tuple(out["encoder_block_3_prefix"].shape))
            # -> (2, 4, 4, 16) (2, 5, 16)
            ```
        """
        if self.config.naflex:
            raise ValueError(
                f"{self.name} takes NaFlex sequences, whose patch grids differ from image to "
                "image, and feature_model maps tokens over one fixed grid: not yet available "
                "for NaFlex. Use the fixed-size model (`model.with_config(naflex=False, "
                "max_num_patches=None)`), or `model.intermediates` for the tokens.")
        if self.config.merges_tokens:
            raise ValueError(
                f"{self.name} merges tokens (token_merging={self.config.token_merging!r}), so its "
                "blocks' tokens are no longer one per patch, and feature_model maps one token to "
                "each patch of the grid. Take the features of `model.with_token_merging(0)`, the "
                "same weights without merging.")
        indices = feature_layers(layers, self.config.num_layers)
        if norm and self.parts.encoder_norm is None:
            raise ValueError(
                "norm=True applies the encoder's final LayerNorm (encoder_norm) to the tokens, but "
                "this model has none: " + ("its final LayerNorm (fc_norm) normalizes the pooled "
                "features" if self.config.fc_norm else "it has no final norm (final_norm=False)")
                + ". Pass norm=False for the blocks' outputs as they are (what timm's "
                "forward_intermediates gives for such a model).")
        outputs = {}
        for i in indices:
            block = self.parts.blocks[i]
            tokens = block.output  # node 0: this model's graph
            if norm:
                tokens = self.parts.encoder_norm(tokens)
            token_map = vit_layers.TokenMap(
                self.config.num_leading_tokens, self.grid_size, self.config.data_format,
                return_prefix=prefix_tokens, dtype=self.compute_dtype, name=f"{block.name}_map")
            if prefix_tokens:
                outputs[block.name], outputs[f"{block.name}_prefix"] = token_map(tokens)
            else:
                outputs[block.name] = token_map(tokens)
        return keras.Model(self.inputs[0], outputs, name=f"{self.name}_features")

    # -- construction ---------------------------------------------------------

    @classmethod
    def from_preset(cls, name, pretrained=None, **overrides):
        """A preset (``"vit_b16"``, ``"ViT-B/16"``: `keras_vit.presets`) or a
        released checkpoint (``"vit_b16.augreg_in21k_ft_in1k_224"``:
        `keras_vit.pretrained`). `pretrained`: True loads weights (the
        checkpoint's, or the preset's recommended one), False gives fresh
        ones, None weights exactly for a checkpoint. `overrides`: `ViT`'s
        arguments, or with weights `from_checkpoint`'s."""
        entry = PRETRAINED.get(str(name))
        if pretrained is None:
            pretrained = entry is not None
        if not pretrained:
            model = cls(preset_config(entry.preset if entry else name), **overrides)
            model.weights_source = f"preset {name}, fresh weights"  # what an adapter file names
            return model
        return cls.from_checkpoint((entry or default_pretrained(name)).name, **overrides)

    @classmethod
    def from_checkpoint(cls, path, image_size=None, num_classes=None,
                        resample_method=None, **overrides):
        """The model stored in a checkpoint, with its weights: a vit_jax /
        AugReg / big_vision ``.npz``, a Hugging Face directory or a timm
        ``.safetensors``, by path, URL or ``hf://`` (docs/checkpoints.md).
        Another ``image_size`` resamples the position embeddings (Sec. 3.2,
        `resample_method` ``"bilinear"`` as vit_jax, ``"bicubic"`` as
        timm, ``"dinov2"`` or RADIO's ``"cpe"``; by default the source's own: DINOv2's and
        RADIO's for their files, else bilinear); another ``num_classes`` gives a new zero-initialised head (0:
        none); `overrides` change other arguments (``dropout_rate``,
        ``dtype``). `keras_vit.load_model` loads through it, and takes a
        ``.keras`` file and a preset's name too."""
        return load_checkpoint(cls, path, image_size, num_classes, resample_method, **overrides)

    def save_checkpoint(self, path, checkpoint_format=None, *, format=None):
        """`keras_vit.weights.save_checkpoint`: this model as a vit_jax
        ``.npz`` (``checkpoint_format="npz"``, the default), a Hugging Face
        directory (``"huggingface"``), a timm ``.safetensors`` file or hub
        directory (``"timm"``) or a keras-hub preset (``"keras_hub"``), which
        `from_checkpoint` (and those libraries) read back. `format`:
        deprecated, `checkpoint_format`."""
        return save_checkpoint(self, path, checkpoint_format, format=format)

    def with_image_size(self, image_size, method="bilinear"):
        """`keras_vit.variants.with_image_size`: this model at another resolution."""
        return variants.with_image_size(self, image_size, method)

    def with_patch_size(self, patch_size, image_size=None, method="bilinear"):
        """`keras_vit.variants.with_patch_size`: FlexiViT's PI-resize of the patch kernel."""
        return variants.with_patch_size(self, patch_size, image_size, method)

    def with_naflex(self, max_num_patches):
        """`keras_vit.variants.with_naflex`: this model taking NaFlex's
        sequences of up to `max_num_patches` patches of images of any size
        (`keras_vit.naflex_inputs`), with the same weights."""
        return variants.with_naflex(self, max_num_patches)

    def with_token_merging(self, r, proportional_attention=None):
        """`keras_vit.variants.with_token_merging`: this model merging `r`
        similar tokens in each block (ToMe), with the same weights."""
        return variants.with_token_merging(self, r, proportional_attention)

    def block_tokens(self):
        """The tokens that leave each encoder block, a list of `num_layers`
        ints, read off the graph: all of them without token merging, fewer
        block by block with it (ToMe's r each)."""
        counts = []
        for index in range(self.num_layers):
            output = self.get_layer(f"encoder_block_{index}").output
            output = output[0] if isinstance(output, (list, tuple)) else output  # ToMe: (x, sizes)
            counts.append(int(output.shape[1]))
        return counts

    def with_config(self, skip=(), method="bilinear", **changes):
        """`keras_vit.variants.with_config`: a copy with some arguments changed."""
        return variants.with_config(self, skip, method, **changes)

    # -- Keras's features, with the images checked first (`keras_vit.input_checks`) --

    def __call__(self, images, *args, **kwargs):
        input_checks.check_images(self, images)  # before Keras's own input checks
        return super().__call__(images, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        """Keras's ``fit``, the images checked first (`keras_vit.input_checks`)."""
        input_checks.check_data(self, x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        """Keras's ``evaluate``, the images checked first as in `fit`."""
        input_checks.check_data(self, x)
        return super().evaluate(x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        """Keras's ``predict``, the images checked first as in `fit`."""
        input_checks.check_data(self, x)
        return super().predict(x, *args, **kwargs)

    def quantize(self, mode, **kwargs):
        """Keras's ``quantize`` (``"int8"``, ``"int4"``, ``"float8"``, ...)
        with the garbage collector held back meanwhile
        (`keras_vit.variants.collections_deferred`); a mode slower than
        float32 on this CPU warns once (`keras_vit.variants.warn_if_slow`).
        A model with DoRA is refused: quantize its merged copy
        (`merge_adapters`)."""
        dora = [path for path, layer in variants.projections(self).items() if has_dora(layer)]
        if dora:
            raise ValueError(
                f"{self.name} has DoRA ({dora[0]}, ...), whose magnitudes rescale the kernel that "
                f"quantizing would replace. Merge it first: `model.merge_adapters().quantize({mode!r})`.")
        with variants.collections_deferred():
            super().quantize(mode, **kwargs)
        variants.warn_if_slow(self, mode)

    def enable_lora(self, rank, target=variants.PROJECTION_NAMES, lora_alpha=None):
        """`keras_vit.variants.enable_lora`: Keras's ``enable_lora(rank)`` on
        the projections named in `target` (``query``, ``key``, ``value``,
        ``out``, ``fc1``, ``fc2``), ``A · B`` scaled by ``lora_alpha / rank``;
        every other weight but the head's frozen."""
        variants.enable_lora(self, rank, target, lora_alpha)

    def merge_lora(self):
        """`keras_vit.variants.merge_lora`: a plain copy with the LoRA weights
        folded into the kernels (the same logits)."""
        return variants.merge_lora(self)

    def enable_dora(self, rank, target=variants.PROJECTION_NAMES, alpha=None):
        """`keras_vit.variants.enable_dora`: DoRA (Liu et al., ICML 2024) of
        rank `rank` on the projections named in `target`: Keras's LoRA
        factors ``lora_kernel_a`` and ``lora_kernel_b`` (scaled by ``alpha /
        rank``; None: `rank`) and ``dora_magnitude``, one per output unit;
        every other weight but the head's frozen. docs/fine_tuning.md."""
        variants.enable_dora(self, rank, target, alpha)

    def merge_dora(self):
        """`keras_vit.variants.merge_adapters` of a DoRA model: a plain copy
        with each kernel the one DoRA computes with (the same logits)."""
        return variants.merge_adapters(self, "DoRA")

    def merge_adapters(self):
        """`keras_vit.variants.merge_adapters`: a copy with LoRA and DoRA
        folded into the kernels, which exports, quantizes and merges tokens
        as a plain ViT; VPT's prompts stay tokens (a model with prompts
        alone is refused: it exports as it is)."""
        return variants.merge_adapters(self)

    def with_prompts(self, num_tokens, deep=True, dropout=0.0):
        """`keras_vit.variants.with_prompts`: a copy with VPT's `num_tokens`
        learned prompt tokens (Jia et al., ECCV 2022; `deep`: in every
        block), the same weights elsewhere, everything frozen but the
        prompts and the head. docs/fine_tuning.md.

        Example:
            ```python
            import numpy as np
            import keras_vit

            model = keras_vit.ViT(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                  hidden_dim=16, mlp_dim=32, num_classes=3)
            prompted = model.with_prompts(4, deep=True)
            print(tuple(prompted(np.zeros((2, 32, 32, 3))).shape))   # -> (2, 3)
            print([w.path for w in prompted.trainable_weights])
            # -> ['prompts/prompts', 'head/kernel', 'head/bias']
            ```
        """
        return variants.with_prompts(self, num_tokens, deep, dropout)

    def save_adapters(self, path):
        """`keras_vit.adapters.save_adapters`: what was trained (LoRA or DoRA
        weights, prompts, the head, any layer unfrozen) to one
        ``.safetensors`` file, with the method, its settings and the base
        model's identity; `keras_vit.load_adapters` reads it back."""
        from keras_vit.adapters import save_adapters  # adapters' layer is above the model's

        return save_adapters(self, path)

    def save(self, filepath, *args, **kwargs):
        """Keras's ``save``; a DoRA model is refused (Keras would save its
        LoRA kernels without the magnitudes): save its adapters or its
        merged copy."""
        self._check_savable(filepath, "save")
        return super().save(filepath, *args, **kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        """Keras's ``save_weights`` (what ``BackupAndRestore`` writes); a
        DoRA model is refused, as by `save`."""
        self._check_savable(filepath, "save_weights")
        return super().save_weights(filepath, *args, **kwargs)

    def _check_savable(self, filepath, method):
        if any(has_dora(layer) for layer in variants.projections(self).values()):
            raise ValueError(
                f"{self.name} has DoRA, whose magnitudes Keras's LoRA layers do not write (`{method}`). "
                "Save the adapters (`model.save_adapters('adapters.safetensors')`), or the merged "
                f"model (`model.merge_adapters().{method}({str(filepath)!r})`); a keras-vit run's "
                "checkpoints hold every variable and resume it whole.")

    def export(self, filepath, format=None, verbose=None, input_signature=None,
               quantize=None, calibration_images=None, *, preprocessing=False,
               dynamic_image_size=False, resample_method="bilinear", **kwargs):
        """Keras's ``export``, traced with Keras's layers alone
        (`keras_vit.kernels.keras_layers_only`), the batch axis dynamic, by
        the route of `format` (`keras_vit.export.routes.ROUTES`, one record
        per format; None: Keras's default, `keras_vit.export.routes.DEFAULT_FORMAT`)
        and its exporter for the backend (`keras_vit.export.exporters`;
        docs/deploy.md has the table of routes). A NaFlex model exports
        with its dict of inputs (`export_signature`: ``"patches"``,
        ``"patch_mask"``, ``"spatial_shapes"``, each a named input of the
        artifact), its position table resized in the graph for any grids.

        ``preprocessing=True`` exports images in, classes out
        (`keras_vit.export.serving`): one input ``images``, uint8 ``(batch,
        height, width, 3)`` of any size, resized and scaled in the graph as
        `keras_vit.data.read_images` does; outputs ``logits`` and
        ``probabilities``; a SavedModel also has the signature
        ``serving_encoded``, for a batch of encoded image files
        (`keras_vit.export.serving.saved_model`). Every artifact carries the
        model's class names and a record of its input
        (`keras_vit.export.class_names`, `keras_vit.export.artifact_info`).

        ``dynamic_image_size=True`` without preprocessing exports the model
        on float images of any height and width, multiples of the patch size
        (one size per batch): the position embeddings are resampled in the
        graph to the batch's patch grid by `resample_method` (``"bilinear"``,
        ``"bicubic"``, ``"dinov2"``, ``"cpe"``), giving what ``with_image_size((height,
        width), method=resample_method)`` gives (`keras_vit.export.serving.
        dynamic_model`). With preprocessing the images are resized to the
        model's size, as always.

        ``quantize="int8"`` (``format="onnx"`` or ``"openvino"``) writes the
        model quantized with onnxruntime's tools for a fast CPU inference
        (`keras_vit.export.int8`): the projections' weights in int8,
        their inputs quantized dynamically, or, given
        ``calibration_images`` (a few hundred; OpenVINO needs them), with
        scales measured on them: float (N, H, W, C) as the model takes
        them, or with ``preprocessing=True`` uint8 pixels (N, H, W, 3) of
        one size, as the artifact takes them. Not for a NaFlex model.
        """
        from keras_vit.export.exporters import export  # export's layer is above the model's

        return export(self, filepath, format, verbose, input_signature, quantize, calibration_images,
                      preprocessing=preprocessing, dynamic_image_size=dynamic_image_size,
                      resample_method=resample_method, **kwargs)

    def export_signature(self):
        """`export`'s ``input_signature``: the model's input with a dynamic
        batch, ``[InputSpec]`` named ``"images"``, or for a NaFlex model
        ``[{"patches": ..., "patch_mask": ..., "spatial_shapes": ...}]``,
        each spec named by its key."""
        def spec(name, tensor):
            return keras.InputSpec(shape=(None, *tensor.shape[1:]), dtype=tensor.dtype, name=name)

        if self.config.naflex:  # the sequences padded to max_num_patches
            shapes = self.config.naflex_input_shapes
            return [{name: keras.InputSpec(shape=(None, *shapes[name]), dtype=tensor.dtype, name=name)
                     for name, tensor in self.input.items()}]
        return [spec("images", self.inputs[0])]

    # -- serialization --------------------------------------------------------

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "dtype": variants.dtype_policy_config(self), **self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        return cls(**variants.with_policy(config))
