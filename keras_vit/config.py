"""The ViT architecture as data: one frozen `ViTConfig` for the model, the
presets, the checkpoint readers and the training configs."""

import dataclasses
import math
import numbers
import types
from collections.abc import Mapping

POOLINGS = ("token", "gap", "map", "none")
POSITION_EMBEDDINGS = ("learned", "sincos2d", "rope", "learned_rope")
ROPE_GRIDS = ("centered", "index")
ROPE_GRID_INDEXINGS = ("ij", "xy")
MLP_ACTIVATIONS = ("gelu", "quick_gelu", "swiglu")
NORM_TYPES = ("layer_norm", "rms_norm")
HEAD_ACTIVATIONS = ("softmax", "sigmoid")


def uses_class_token(pooling, position_embedding):
    """Whether the model has a [class] token: for token pooling, and for the
    token sequence (``"none"``) when position embeddings are learned."""
    return pooling == "token" or (pooling == "none" and position_embedding in ("learned", "learned_rope"))


def resnet_stride(block_units):
    """The stride of a BiT ResNet stem with `block_units` per stage: 4 for the
    root, then 2 for each stage after the first."""
    return 4 * 2 ** max(len(block_units) - 1, 0)


@dataclasses.dataclass(frozen=True)
class BlockOptions:
    """The options of a Transformer encoder block (Eq. 2-3), as one frozen value.

    `keras_vit.layers.TransformerEncoder` takes it and hands the same value
    to its `MultiHeadDotProductAttention` and `MlpBlock`, each reading the
    fields it uses. Every field has `ViTConfig`'s name for the same option
    (`ViTConfig.block_options` makes one from a config), so no layer renames
    one; the defaults are `ViTConfig`'s (ViT-B's blocks). What varies from
    block to block or only in training (stochastic depth, dropout, token
    merging, seeds) is each layer's own argument, not an option.

    Fields:
        num_heads: int. Attention heads.
        mlp_dim: int. Hidden width of the MLP (each half of SwiGLU's fc1).
        qkv_bias: bool. Biases on the query, key and value projections.
        key_bias: bool. With `qkv_bias`, a bias on the key projection too
            (False: DINOv3's).
        qk_norm: bool. A norm of each head's query and key before their
            product (Dehghani et al., "Scaling Vision Transformers to 22
            Billion Parameters", 2023; timm's ``qk_norm``).
        attention_norm: bool. A norm of the heads' outputs, a token's heads
            together, before the output projection (EVA-CLIP's sub-LN,
            timm's ``scale_attn_inner``).
        out_bias: bool. A bias on the attention's output projection (False:
            AIMv2's).
        rope: dict or None. `keras_vit.layers.RotaryPositionEmbedding`'s
            arguments (``grid_size``, ``num_prefix_tokens``, ``theta``, ...):
            the patch tokens' queries and keys turned by their place on the
            grid (DINOv3's, EVA-02's); kept read-only.
        causal: bool. Token ``i`` attends to tokens ``0..i`` only (CLIP's
            text tower, `keras_vit.TextTransformer`); `ViTConfig` has no such
            field: an image tower attends both ways.
        mlp_activation: ``"gelu"``, ``"quick_gelu"`` (OpenAI's CLIP) or
            ``"swiglu"`` (DINOv2 giant; Shazeer, "GLU Variants Improve
            Transformer", 2020).
        gelu_approximate: bool. tanh GELU (the original's) or exact erf GELU.
        mlp_bias: bool. Biases on the MLP's two dense layers.
        mlp_norm: bool. A norm of the MLP's hidden units before its second
            layer (EVA-02's).
        layer_scale_init: float or None. The initial per-channel scale of
            each residual branch (LayerScale: Touvron et al., "Going deeper
            with Image Transformers", 2021); None: none.
        layer_norm_epsilon: float. The epsilon of every norm of the block.
        norm_bias: bool. Every LayerNorm of the block with its bias (beta).
        norm_type: ``"layer_norm"`` or ``"rms_norm"`` (every norm an RMSNorm).

    Example:
        ```python
        from keras_vit import ViTConfig
        from keras_vit.config import BlockOptions

        options = BlockOptions(num_heads=4, mlp_dim=128, qk_norm=True)
        print(options.num_heads, options.mlp_dim, options.qk_norm)   # -> 4 128 True
        print(BlockOptions.from_dict(options.to_dict()) == options)  # -> True
        print(ViTConfig(num_heads=6, hidden_dim=384, mlp_dim=1536).block_options.num_heads)  # -> 6
        ```
    """

    num_heads: int = 12
    mlp_dim: int = 3072
    qkv_bias: bool = True
    key_bias: bool = True
    qk_norm: bool = False
    attention_norm: bool = False
    out_bias: bool = True
    rope: Mapping | None = None
    causal: bool = False
    mlp_activation: str = "gelu"
    gelu_approximate: bool = True
    mlp_bias: bool = True
    mlp_norm: bool = False
    layer_scale_init: float | None = None
    layer_norm_epsilon: float = 1e-6
    norm_bias: bool = True
    norm_type: str = "layer_norm"

    def __post_init__(self):
        for name in ("num_heads", "mlp_dim"):
            _check_int(name, getattr(self, name), 1)
            object.__setattr__(self, name, int(getattr(self, name)))
        for field in dataclasses.fields(self):
            if field.type is bool and not isinstance(getattr(self, field.name), bool):
                raise ValueError(f"`{field.name}` must be True or False, got {getattr(self, field.name)!r}.")
        if self.mlp_activation not in MLP_ACTIVATIONS:
            raise ValueError(f"Unknown mlp_activation {self.mlp_activation!r}; use one of {MLP_ACTIVATIONS}.")
        if self.norm_type not in NORM_TYPES:
            raise ValueError(f"Unknown norm_type {self.norm_type!r}; use one of {NORM_TYPES}.")
        if not is_number(self.layer_norm_epsilon) or self.layer_norm_epsilon <= 0:
            raise ValueError(f"`layer_norm_epsilon` must be a number > 0, got {self.layer_norm_epsilon!r}.")
        object.__setattr__(self, "layer_norm_epsilon", float(self.layer_norm_epsilon))
        if self.layer_scale_init is not None:
            if not is_number(self.layer_scale_init):
                raise ValueError(f"`layer_scale_init` must be a number or None, got {self.layer_scale_init!r}.")
            object.__setattr__(self, "layer_scale_init", float(self.layer_scale_init))
        if self.rope is not None:
            if not isinstance(self.rope, Mapping):
                raise ValueError(f"`rope` must be None or a dict of RotaryPositionEmbedding's "
                                 f"arguments, got {self.rope!r}.")
            object.__setattr__(self, "rope", types.MappingProxyType(dict(self.rope)))

    def __reduce__(self):  # copied and pickled through its dict (a read-only `rope` pickles not)
        return type(self).from_dict, (self.to_dict(),)

    @property
    def norm_arguments(self):
        """The `keras_vit.layers.normalization` arguments of every norm of
        the block (``norm1``, ``norm2``, qk-norm's, the attention's and the
        MLP's norms)."""
        return dict(norm_type=self.norm_type, epsilon=self.layer_norm_epsilon, bias=self.norm_bias)

    def to_dict(self):
        """The fields as a JSON-ready dict (`TransformerEncoder`'s
        ``get_config()["options"]``)."""
        options = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return {**options, "rope": None if self.rope is None else dict(self.rope)}

    @classmethod
    def from_dict(cls, options):
        """Options from `to_dict`'s dict (or part of one): an unknown key is
        refused with the valid ones listed."""
        unknown = sorted(set(options) - set(BLOCK_OPTIONS))
        if unknown:
            raise ValueError(f"Unknown block option(s) {', '.join(map(repr, unknown))}. Valid ones: "
                             f"{', '.join(BLOCK_OPTIONS)}.")
        return cls(**options)

    @classmethod
    def of(cls, value):
        """`value` as `BlockOptions`: itself, or one from its `to_dict` dict."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls.from_dict(value)
        raise ValueError(f"The block options must be a keras_vit.config.BlockOptions or a dict of "
                         f"its fields, got {value!r}: e.g. BlockOptions(num_heads=4, mlp_dim=128).")

    @classmethod
    def split(cls, config, renamed=()):
        """``(options, rest)`` of a layer config saved by an earlier version,
        which took each option as an argument of its own: the options among
        `config`'s keys, some under the layer's old names (`renamed`: pairs
        ``(old name, field)``), and the rest of `config`."""
        rest = dict(config)
        for old, name in renamed:
            if old in rest:
                rest[name] = rest.pop(old)
        options = {name: rest.pop(name) for name in BLOCK_OPTIONS if name in rest}
        return cls.from_dict(options), rest


BLOCK_OPTIONS = tuple(field.name for field in dataclasses.fields(BlockOptions))


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Every architecture argument of `keras_vit.ViT`, checked once.

    The fields are `ViT`'s constructor arguments (see its docstring); the
    defaults are ViT-B/16 at 224 px. Sizes are normalised (an int image or
    patch size becomes a pair, ``data_format=None`` Keras's image data
    format) and every value is checked on construction: a ValueError names
    the argument, what it got and what it takes.

    Derived: `grid_size` (patches per side, Eq. 1's N = h * w),
    `num_prefix_tokens` ([class], distillation and register tokens),
    `input_shape`.

    The options of the ViT family are off by default, so the defaults are
    the paper's model: ``mlp_activation`` (``"quick_gelu"``: OpenAI's CLIP;
    ``"swiglu"``: DINOv2 giant), ``qk_norm`` (a LayerNorm of each head's
    query and key), ``norm_pre`` (a LayerNorm before the encoder: CLIP),
    ``fc_norm`` (the final LayerNorm after pooling instead of before it:
    timm's ``fc_norm``), ``final_norm=False`` (no final norm at all: the
    Perception Encoder's spatial towers, timm's ``use_post_transformer_norm=False``), ``patch_bias=False`` (CLIP's patch embedding),
    ``mlp_bias=False`` (MLP layers without biases: keras-hub's
    ``use_mlp_bias``, DINOv3's ``mlp_bias``), ``mlp_norm`` (a norm of the
    MLP's hidden units before its second layer: EVA-02's), ``attention_norm`` (a norm of
    the attention heads' outputs before its output projection: EVA-CLIP's
    sub-LN, timm's ``scale_attn_inner``), ``norm_bias=False`` (every
    LayerNorm without its bias, beta: ViT-22B's and PaLI's), ``norm_type="rms_norm"``
    (every norm an RMSNorm, Zhang and Sennrich 2019, Keras's ``RMSNormalization``:
    AIMv2's, with ``norm_bias=False``), ``patch_norm`` (a norm of the patch
    embeddings before the position embeddings are added: AIMv2's, timm's
    ``embed_norm_layer``), ``out_bias=False`` (the attention's output
    projection without bias: AIMv2's, timm's ``proj_bias`` with ``mlp_bias``), ``distillation`` (DeiT's
    distillation token and head, the two heads' logits averaged; the
    models' constructors also take it as ``distillation_token``;
    ``distillation_head=False``: the token without its head, the [class]
    token's head alone, as keras-hub's ``DeiTImageClassifier``),
    ``position_embedding="rope"`` with ``rope_theta`` (DINOv3's 2-D rotary
    position embeddings of the patch tokens' queries and keys in every
    block, nothing added to the sequence; ``"learned_rope"``: the learned
    table added and rotary embeddings in every block, EVA-02's and the
    Perception Encoder's), its grid ``rope_grid`` (``"centered"``: DINOv3's
    patch centres in [-1, 1] times 2 pi; ``"index"``: EVA-02's and PE's
    row and column index plus ``rope_grid_offset``, rescaled to
    ``rope_reference_grid``, timm's ``ref_feat_shape``, where given) and
    ``rope_grid_indexing`` (``"ij"``: the rows' angles first; ``"xy"``:
    the columns', PE's), ``pooling_num_heads`` and ``pooling_mlp_dim`` (the
    MAP head's own heads and MLP width, PE's; None: the blocks'),
    ``key_bias=False`` (the key
    projection without bias, the query and value with: DINOv3) and
    ``class_token`` (True: a [class] token also where the pooling does not
    read it, as timm's ``class_token=True`` with ``global_pool="avg"`` in
    MAE's and BEiT's fine-tuned ViTs; None, the default: a [class] token
    exactly where the pooling reads it; a value equal to that default is
    stored as None).

    For image-text models (`keras_vit.ImageTextModel`): ``projection_dim``
    (a linear map of the pooled features to that many, without bias:
    CLIP's ``visual_projection``; 0, the default, none) and
    ``normalize_features`` (the features divided by their L2 norm before
    the head: a zero-shot classifier's, `keras_vit.zero_shot_classifier`).

    ``head_activation`` records how the head's logits become
    probabilities: ``"softmax"`` over the classes (the paper's), or
    ``"sigmoid"``, each class on its own (a SigLIP zero-shot classifier,
    a multi-label head). The model gives logits either way; ``keras-vit
    predict`` and an exported artifact's ``probabilities`` apply it.

    ``pixel_scale`` and ``pixel_offset`` record how the model's input is
    made from pixels in [0, 255]: ``pixels * pixel_scale + pixel_offset``
    (a number, or one per channel). The defaults are the paper's [-1, 1]
    (``1/127.5``, ``-1``); a keras-hub preset's image converter and a
    Hugging Face folder's ``preprocessor_config.json`` record their own
    (ImageNet's mean and standard deviation for DeiT, DINOv2 and DINOv3). The model takes images so scaled; the recorded values
    are applied where keras_vit makes images (`keras_vit.data.read_images`
    with ``model=``, ``keras-vit predict``, ``explain``, ``evaluate``, and
    a run's input pipelines, as when fine-tuning from such a model) and
    written to keras-hub presets.

    ``naflex=True`` with ``max_num_patches`` makes the model take images
    of any size and aspect ratio as NaFlex sequences (SigLIP 2; docs/naflex.md):
    a dict of ``"patches"``, ``"patch_mask"`` and ``"spatial_shapes"``
    (`keras_vit.naflex_inputs`), each image's patches padded to
    ``max_num_patches``. ``image_size`` is then the size its position table
    is learned at (the table is resized to each image's grid); the weights
    are those of the fixed-size model (`keras_vit.ViT.with_naflex`).

    ``token_merging`` (ToMe's ``r``, Bolya et al., "Token Merging: Your
    ViT But Faster", ICLR 2023; docs/token_merging.md) merges that many
    pairs of similar tokens in every block (a list: one count per block),
    between its attention and its MLP, so that later blocks run on fewer
    tokens: faster, with the same weights. ``proportional_attention`` (True,
    ToMe's default for a model trained without merging) adds ``log(size)``
    of each merged token to its attention logits.

    ``prompt_tokens`` (visual prompt tuning, Jia et al., "Visual Prompt
    Tuning", ECCV 2022; docs/fine_tuning.md) puts that many learned tokens
    between the prefix tokens ([class], distillation, registers) and the
    patches, after the position embeddings; ``deep_prompts=True`` gives
    every block its own, each replacing the previous block's prompt
    outputs (VPT-deep); ``prompt_dropout`` drops them in training. The
    pooling reads the prefix tokens and patches, never the prompts
    (`keras_vit.ViT.with_prompts`).

    Example:
        ```python
        from keras_vit import ViTConfig

        config = ViTConfig(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                           hidden_dim=16, mlp_dim=32, num_classes=10)
        print(config.grid_size, config.num_prefix_tokens, config.input_shape)
        # -> (4, 4) 1 (32, 32, 3)
        print(config.replace(image_size=64).grid_size)   # -> (8, 8)
        ```
    """

    image_size: tuple = (224, 224)
    patch_size: tuple = (16, 16)
    num_layers: int = 12
    num_heads: int = 12
    hidden_dim: int = 768
    mlp_dim: int = 3072
    num_classes: int = 1000
    pooling: str = "token"
    pooling_num_heads: int | None = None
    pooling_mlp_dim: int | None = None
    representation_size: int | None = None
    projection_dim: int = 0
    normalize_features: bool = False
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    layer_norm_epsilon: float = 1e-6
    gelu_approximate: bool = True
    qkv_bias: bool = True
    key_bias: bool = True
    layer_scale_init: float | None = None
    num_registers: int = 0
    position_embedding: str = "learned"
    rope_theta: float = 100.0
    rope_grid: str = "centered"
    rope_grid_offset: float = 0.0
    rope_grid_indexing: str = "ij"
    rope_reference_grid: tuple | None = None
    resnet_block_units: tuple | None = None
    resnet_width_factor: float = 1
    head_bias_init: float = 0.0
    mlp_activation: str = "gelu"
    qk_norm: bool = False
    norm_pre: bool = False
    fc_norm: bool = False
    final_norm: bool = True
    patch_bias: bool = True
    mlp_bias: bool = True
    mlp_norm: bool = False
    attention_norm: bool = False
    norm_bias: bool = True
    norm_type: str = "layer_norm"
    patch_norm: bool = False
    out_bias: bool = True
    distillation: bool = False
    distillation_head: bool = True
    class_token: bool | None = None
    num_channels: int = 3
    class_names: tuple | None = None
    head_activation: str = "softmax"
    pixel_scale: float | tuple = 1 / 127.5
    pixel_offset: float | tuple = -1.0
    data_format: str | None = None
    naflex: bool = False
    max_num_patches: int | None = None
    token_merging: int | tuple = 0
    proportional_attention: bool = True
    prompt_tokens: int = 0
    deep_prompts: bool = False
    prompt_dropout: float = 0.0

    def __post_init__(self):
        self._check_sizes_and_kinds()
        self._check_heads_and_pooling()
        self._check_positions()
        self._check_pixels_and_names()
        self._check_naflex()
        self._check_grid()
        self._check_token_merging()
        self._check_prompts()
        if self.rope is not None:  # every block's options, rotary arguments included
            self._put("_block_options", dataclasses.replace(self._block_options, rope=self.rope))

    def _put(self, name, value):
        object.__setattr__(self, name, value)  # the dataclass is frozen

    def _check_sizes_and_kinds(self):
        """Sizes normalised to pairs; counts, rates, choices and flags checked."""
        self._put("image_size", pair(self.image_size, "image_size"))
        self._put("patch_size", pair(self.patch_size, "patch_size"))
        self._put("data_format", standardize_data_format(self.data_format))
        for name, lowest in (("num_layers", 1), ("hidden_dim", 1), ("num_classes", 0), ("num_registers", 0),
                             ("projection_dim", 0), ("num_channels", 1)):
            _check_int(name, getattr(self, name), lowest)
        # The blocks' options (heads, MLP, norms, biases), checked once by BlockOptions and kept.
        self._put("_block_options", BlockOptions(**{name: getattr(self, name) for name in BLOCK_OPTIONS
                                                    if name not in ("rope", "causal")}))
        for name in ("representation_size", "pooling_num_heads", "pooling_mlp_dim"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
            rate = getattr(self, name)
            if not is_number(rate) or not 0 <= rate < 1:
                raise ValueError(f"`{name}` must be in [0, 1), got {rate!r}.")
        if self.pooling not in POOLINGS:
            raise ValueError(f"Unknown pooling {self.pooling!r}; use one of {POOLINGS}.")
        if self.head_activation not in HEAD_ACTIVATIONS:
            raise ValueError(f"Unknown head_activation {self.head_activation!r}; use one of "
                             f"{HEAD_ACTIVATIONS} (how the logits become probabilities).")
        for name in ("norm_pre", "fc_norm", "final_norm", "patch_bias", "patch_norm", "distillation",
                     "distillation_head", "normalize_features"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be True or False, got {getattr(self, name)!r}.")
        if self.norm_type == "rms_norm" and self.norm_bias:
            raise ValueError("norm_type='rms_norm' normalises by the root mean square and scales, "
                             "with no bias: set norm_bias=False too.")

    def _check_heads_and_pooling(self):
        """DeiT's distillation, the [class] token, the projection and fc_norm against the pooling."""
        if not self.distillation_head and not self.distillation:
            raise ValueError("distillation_head=False leaves out the head of DeiT's distillation "
                             "token, and this model has none. Set distillation=True, or leave "
                             "distillation_head at True.")
        if self.distillation and (self.pooling != "token" or (
                self.distillation_head and (self.fc_norm or self.representation_size))):
            raise ValueError(
                "distillation (DeiT) reads the [class] and distillation tokens: it needs "
                f"pooling='token' (got {self.pooling!r}), and with its head no fc_norm and no "
                "representation_size."
            )
        if not (self.class_token is None or isinstance(self.class_token, bool)):
            raise ValueError(f"`class_token` must be True, False or None, got {self.class_token!r}.")
        if self.class_token is False and self.pooling == "token":
            raise ValueError("pooling='token' reads the [class] token, and class_token=False "
                             "leaves it out. Use class_token=None (or True), or another pooling.")
        if self.class_token == uses_class_token(self.pooling, self.position_embedding):
            self._put("class_token", None)  # the default, stored one way
        if (self.projection_dim or self.normalize_features) and (
                self.pooling == "none" or self.distillation):
            raise ValueError(
                "projection_dim and normalize_features act on one pooled feature vector; "
                f"pooling={self.pooling!r}" + (" with distillation" if self.distillation else "")
                + " gives " + ("a token sequence" if self.pooling == "none" else "two tokens")
                + ". Use pooling 'token', 'gap' or 'map' without distillation.")
        pooling_options = [n for n in ("pooling_num_heads", "pooling_mlp_dim") if getattr(self, n) is not None]
        if pooling_options and self.pooling != "map":
            raise ValueError(f"{' and '.join(pooling_options)} size the attention-pooling head "
                             f"(pooling='map'), and this model's pooling is {self.pooling!r}. Use "
                             "pooling='map', or leave them at None.")
        if self.pooling_num_heads and self.hidden_dim % self.pooling_num_heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} is not divisible by pooling_num_heads "
                             f"{self.pooling_num_heads}.")
        if self.fc_norm and not self.final_norm:
            raise ValueError("fc_norm=True is the final norm, after pooling, and final_norm=False "
                             "leaves the final norm out. Use one of them.")
        if self.fc_norm and self.pooling == "none":
            raise ValueError("fc_norm normalises the pooled features; pooling='none' has none. "
                             "Use fc_norm=False, or another pooling.")

    def _check_positions(self):
        """The position embedding, its RoPE period and head size, and the key bias."""
        if self.position_embedding not in POSITION_EMBEDDINGS:
            raise ValueError(
                f"Unknown position_embedding {self.position_embedding!r}; use one of "
                f"{POSITION_EMBEDDINGS}."
            )
        if not is_number(self.rope_theta) or self.rope_theta <= 0:
            raise ValueError(f"`rope_theta` must be a number > 0, got {self.rope_theta!r}.")
        self._put("rope_theta", float(self.rope_theta))
        rope_options = {"rope_theta": (100.0, "the base period"), "rope_grid": ("centered", "the grid"),
                        "rope_grid_offset": (0.0, "the grid's offset"),
                        "rope_grid_indexing": ("ij", "the order of the axes"),
                        "rope_reference_grid": (None, "the reference grid")}
        for name, (default, what) in rope_options.items():
            if getattr(self, name) != default and not self.uses_rope:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is {what} of rotary position embeddings, and "
                    f"this model's are {self.position_embedding!r}. Use position_embedding='rope' or "
                    f"'learned_rope', or leave {name} at {default!r}.")
        if self.rope_grid not in ROPE_GRIDS:
            raise ValueError(f"Unknown rope_grid {self.rope_grid!r}; use one of {ROPE_GRIDS}.")
        if self.rope_grid_indexing not in ROPE_GRID_INDEXINGS:
            raise ValueError(f"Unknown rope_grid_indexing {self.rope_grid_indexing!r}; use one of "
                             f"{ROPE_GRID_INDEXINGS}.")
        if not is_number(self.rope_grid_offset):
            raise ValueError(f"`rope_grid_offset` must be a number, got {self.rope_grid_offset!r}.")
        self._put("rope_grid_offset", float(self.rope_grid_offset))
        if self.rope_reference_grid is not None:
            self._put("rope_reference_grid", pair(self.rope_reference_grid, "rope_reference_grid"))
        if self.rope_grid == "centered" and (self.rope_grid_offset or self.rope_reference_grid):
            raise ValueError("rope_grid_offset and rope_reference_grid move and rescale the patch "
                             "indices of rope_grid='index' (EVA-02's, PE's); rope_grid='centered' "
                             "(DINOv3's) has the patch centres in [-1, 1]. Use rope_grid='index', or "
                             "leave them at 0 and None.")
        if not self.key_bias and not self.qkv_bias:
            raise ValueError("key_bias=False leaves out the key projection's bias, and "
                             "qkv_bias=False already leaves out the query, key and value biases. "
                             "Leave key_bias at True.")
        if (self.uses_rope and not self.hidden_dim % self.num_heads
                and (self.hidden_dim // self.num_heads) % 4):
            raise ValueError(
                f"position_embedding={self.position_embedding!r} rotates pairs of each head's dimensions by the patch's "
                f"row and column: the head size {self.hidden_dim // self.num_heads} (hidden_dim / "
                "num_heads) must be a multiple of 4.")

    def _check_pixels_and_names(self):
        """Per-channel pixel scaling, class names, heads dividing the width, the ResNet units."""
        for name in ("pixel_scale", "pixel_offset"):
            self._put(name, _per_channel(name, getattr(self, name), self.num_channels))
        if 0.0 in _as_tuple(self.pixel_scale):
            raise ValueError(f"`pixel_scale` must not be 0, got {self.pixel_scale!r}.")
        if self.class_names is not None:
            names = tuple(str(name) for name in self.class_names)
            if len(names) != self.num_classes:
                raise ValueError(
                    f"{len(names)} class_names for {self.num_classes} classes; give one "
                    "name per class, or None."
                )
            self._put("class_names", names)
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                f"hidden_dim {self.hidden_dim} is not divisible by num_heads {self.num_heads}."
            )
        if self.resnet_block_units is not None:
            self._put("resnet_block_units", tuple(int(n) for n in self.resnet_block_units))

    def _check_naflex(self):
        """NaFlex's flag and its patch budget."""
        if not isinstance(self.naflex, bool):
            raise ValueError(f"`naflex` must be True or False, got {self.naflex!r}.")
        if self.naflex:
            if not is_int(self.max_num_patches, 1):
                raise ValueError(
                    f"naflex=True needs `max_num_patches`, the patches each image may have "
                    f"(an int >= 1, e.g. 256), got {self.max_num_patches!r}.")
            self._put("max_num_patches", int(self.max_num_patches))
            if self.resnet_block_units is not None:
                raise ValueError(
                    "naflex=True cuts images into pixel patches, and a hybrid model "
                    "(resnet_block_units) embeds patches of ResNet features. Use naflex=False "
                    "for hybrids.")
        elif self.max_num_patches is not None:
            raise ValueError(
                f"max_num_patches={self.max_num_patches!r} is the length of NaFlex's patch "
                "sequences, and this model has naflex=False. Set naflex=True too, or leave "
                "max_num_patches at None.")

    def _check_grid(self):
        """Image sizes that divide into patches (times the ResNet stride)."""
        stride = self.stem_stride
        for size, patch, axis in zip(self.image_size, self.patch_size, ("height", "width")):
            if size % (patch * stride):
                raise ValueError(
                    f"image {axis} {size} is not divisible by the patch size "
                    f"{patch * stride}"
                    + (f" (patch {patch} x ResNet stride {stride})" if stride > 1 else "")
                    + f". Use an image size that is a multiple of {patch * stride}."
                )

    def _check_token_merging(self):
        """ToMe's r: an int, or one per block; where merging cannot work."""
        schedule = merge_schedule(self.token_merging, self.num_layers)
        if not isinstance(self.token_merging, numbers.Integral):
            self._put("token_merging", schedule)
        if not isinstance(self.proportional_attention, bool):
            raise ValueError(f"`proportional_attention` must be True or False, got "
                             f"{self.proportional_attention!r}.")
        if not any(schedule):
            return
        why = ("NaFlex inputs (naflex=True): their padding would be merged with the patches"
               if self.naflex else
               "rotary position embeddings (position_embedding='rope'): each block turns the "
               "queries and keys by their patch's place on the grid, and a merged token has none"
               if self.uses_rope else None)
        if why:
            raise ValueError(
                f"token_merging={self.token_merging!r} cannot merge the tokens of a model with "
                f"{why}. Use token_merging=0 for this model.")

    def _check_prompts(self):
        """VPT's prompts: a count, where they can go, deep only with some."""
        _check_int("prompt_tokens", self.prompt_tokens, 0)
        if not isinstance(self.deep_prompts, bool):
            raise ValueError(f"`deep_prompts` must be True or False, got {self.deep_prompts!r}.")
        if not is_number(self.prompt_dropout) or not 0 <= self.prompt_dropout < 1:
            raise ValueError(f"`prompt_dropout` must be in [0, 1), got {self.prompt_dropout!r}.")
        if not self.prompt_tokens:
            if self.deep_prompts:
                raise ValueError("deep_prompts=True gives every block its own prompts, and "
                                 "prompt_tokens=0 asks for none: set prompt_tokens (e.g. 10).")
            return
        if self.naflex:
            raise ValueError(
                f"prompt_tokens={self.prompt_tokens} (visual prompt tuning) cannot go with NaFlex "
                "(naflex=True): its sequences are padded patches with a mask that has no place for "
                "prompts. Prompt the fixed-size model (naflex=False), or fine-tune with LoRA or DoRA.")
        if self.merges_tokens:
            raise ValueError(
                f"prompt_tokens={self.prompt_tokens} (visual prompt tuning) cannot go with token "
                f"merging (token_merging={self.token_merging!r}): prompts are never merged, and "
                "ToMe would merge them with the patches. Use token_merging=0 with prompts.")

    @property
    def merge_counts(self):
        """Tokens merged away in each block (`token_merging`, ToMe's ``r``),
        before the cap at half of the tokens that are not prefix tokens."""
        return merge_schedule(self.token_merging, self.num_layers)

    @property
    def merges_tokens(self):
        """Whether any block merges tokens (ToMe)."""
        return any(self.merge_counts)

    # -- derived ----------------------------------------------------------------

    @property
    def stem_stride(self):
        """1 without a ResNet stem, else its stride."""
        return 1 if self.resnet_block_units is None else resnet_stride(self.resnet_block_units)

    @property
    def grid_size(self):
        """``(h, w)``: patches per column and row."""
        stride = self.stem_stride
        return tuple(size // (patch * stride) for size, patch in zip(self.image_size, self.patch_size))

    @property
    def uses_class_token(self):
        """Whether the sequence starts with a [class] token: `class_token`,
        or where None, where the pooling reads one (`uses_class_token`)."""
        if self.class_token is not None:
            return self.class_token
        return uses_class_token(self.pooling, self.position_embedding)

    @property
    def distills_by_head(self):
        """Whether the distillation token has its own head (DeiT's
        ``head_dist``), averaged with the [class] token's."""
        return self.distillation and self.distillation_head

    @property
    def num_prefix_tokens(self):
        """The [class] and distillation tokens, if any, plus the registers."""
        return int(self.uses_class_token) + int(self.distillation) + self.num_registers

    @property
    def num_leading_tokens(self):
        """The tokens before the patches in the blocks' sequence: the prefix
        tokens, then VPT's `prompt_tokens`."""
        return self.num_prefix_tokens + self.prompt_tokens

    @property
    def input_shape(self):
        """One image's shape, in `data_format`."""
        if self.data_format == "channels_last":
            return (*self.image_size, self.num_channels)
        return (self.num_channels, *self.image_size)

    @property
    def naflex_input_shapes(self):
        """NaFlex's inputs, each example's shape by name (None when
        ``naflex`` is False): ``"patches"`` ``(max_num_patches, P_h * P_w *
        C)``, ``"patch_mask"`` ``(max_num_patches,)``, ``"spatial_shapes"``
        ``(2,)``."""
        if not self.naflex:
            return None
        values = self.patch_size[0] * self.patch_size[1] * self.num_channels
        return {"patches": (self.max_num_patches, values),
                "patch_mask": (self.max_num_patches,), "spatial_shapes": (2,)}

    @property
    def num_params(self):
        """The parameter count of this architecture, without building it
        (`keras_vit.presets.count_params`; equal to ``ViT(config).count_params()``)."""
        c = self
        d, m = c.hidden_dim, c.mlp_dim
        total, channels = 0, c.num_channels
        if c.resnet_block_units is not None:
            width = int(64 * c.resnet_width_factor)
            total += 49 * channels * width + 2 * width
            channels = width
            for stage, units in enumerate(c.resnet_block_units):
                w = width * 2**stage
                for unit in range(units):
                    total += channels * w + 9 * w * w + w * 4 * w + 2 * (w + w + 4 * w)
                    if channels != 4 * w or (stage > 0 and unit == 0):
                        total += channels * 4 * w + 2 * 4 * w
                    channels = 4 * w
        ln = 1 + c.norm_bias  # a norm's vectors: scale (and bias)
        total += math.prod(c.patch_size) * channels * d + d * c.patch_bias + ln * d * c.patch_norm
        total += c.num_prefix_tokens * d
        if c.position_table == "learned":
            total += (c.num_prefix_tokens + math.prod(c.grid_size)) * d
        gated = 2 if c.mlp_activation == "swiglu" else 1
        mlp = d * gated * m + gated * m + m * d + d  # the MAP head's: always with biases
        block_mlp = mlp if c.mlp_bias else mlp - gated * m - d
        attention = 4 * d * d + d * c.out_bias + ((2 + c.key_bias) * d if c.qkv_bias else 0)
        qk_norm = 2 * ln * (d // c.num_heads) if c.qk_norm else 0
        block = (2 * ln * d + attention + qk_norm + block_mlp + ln * m * c.mlp_norm + ln * d * c.attention_norm
                 + (2 * d if c.layer_scale_init is not None else 0))
        total += c.num_layers * block + ln * d * (c.final_norm + c.norm_pre)  # encoder_norm (or fc_norm)
        if c.pooling == "map":
            pm = c.pooling_mlp_dim or m
            total += d + 4 * d * d + 4 * d + ln * d + d * gated * pm + gated * pm + pm * d + d
        features = d
        if c.representation_size:
            total += d * c.representation_size + c.representation_size
            features = c.representation_size
        if c.projection_dim:
            total += features * c.projection_dim
            features = c.projection_dim
        if c.num_classes:
            total += (features * c.num_classes + c.num_classes) * (1 + c.distills_by_head)
        depth = c.num_layers if c.deep_prompts else 1
        return total + depth * c.prompt_tokens * d

    @property
    def block_options(self):
        """The `BlockOptions` of every encoder block: this config's fields
        (and `rope`) of the same names, made and checked once, when the
        config is (an image tower's blocks attend both ways: not `causal`)."""
        return self._block_options

    @property
    def uses_rope(self):
        """Whether each block turns queries and keys by rotary position
        embeddings (``position_embedding`` ``"rope"`` or ``"learned_rope"``)."""
        return self.position_embedding in ("rope", "learned_rope")

    @property
    def position_table(self):
        """The `keras_vit.layers.PositionEmbedding` kind of the table added to
        the tokens: ``"learned"`` beside rotary ones (``"learned_rope"``)."""
        return "learned" if self.position_embedding == "learned_rope" else self.position_embedding

    @property
    def rope(self):
        """The rotary position embeddings' arguments of each block's
        attention (`keras_vit.layers.RotaryPositionEmbedding`), or None."""
        if not self.uses_rope:
            return None
        rope = dict(grid_size=self.grid_size, num_prefix_tokens=self.num_leading_tokens,
                    theta=self.rope_theta)
        if self.rope_grid != "centered":  # DINOv3's, the layer's default
            rope.update(grid=self.rope_grid, grid_offset=self.rope_grid_offset,
                        reference_grid=self.rope_reference_grid)
        if self.rope_grid_indexing != "ij":
            rope["grid_indexing"] = self.rope_grid_indexing
        return rope

    # -- as data ------------------------------------------------------------------

    def replace(self, **changes):
        """A copy with some fields changed (checked as on construction)."""
        return type(self).from_dict({**self.to_dict(), **changes})

    def to_dict(self):
        """The fields as a JSON-ready dict (tuples as lists are read back the same)."""
        config = dataclasses.asdict(self)
        if config["class_names"] is not None:
            config["class_names"] = list(config["class_names"])
        return config

    @classmethod
    def from_dict(cls, config):
        """A config from `to_dict`'s dict (or part of one): an unknown key is
        refused with the valid ones listed."""
        unknown = sorted(set(config) - set(FIELDS))
        if unknown:
            raise ValueError(
                f"Unknown ViT argument(s) {', '.join(map(repr, unknown))}. Valid ones: "
                f"{', '.join(FIELDS)}."
            )
        return cls(**config)


FIELDS = tuple(field.name for field in dataclasses.fields(ViTConfig))
# Constructor keywords that name a field by another name: DeiT's
# ``distillation_token=True`` is ``distillation=True`` (its token and head).
ALIASES = {"distillation_token": "distillation"}


def vit_config(config, fields):
    """The `ViTConfig` a model is built from: `config` with `fields` (a
    dict of `ViTConfig` fields) replaced, or a config of `fields` when
    `config` is None."""
    if config is None:
        return ViTConfig.from_dict(fields)
    if not isinstance(config, ViTConfig):
        raise ValueError(f"`config` must be a keras_vit.ViTConfig or None, got {config!r}.")
    return config.replace(**fields) if fields else config


def constructor_config(owner, config, kwargs, fields=None, note=""):
    """The `ViTConfig` of a model's constructor arguments: `config` with the
    `ViTConfig` fields among `kwargs` (popped; `fields`, all by default)
    replacing its own. What is left in `kwargs` may only be Keras's ``name``
    and ``trainable``; anything else is refused, naming `owner`'s valid
    arguments (and `note`)."""
    fields = FIELDS if fields is None else fields
    for alias, field in ALIASES.items():
        if alias in kwargs and field in fields:
            if field in kwargs:
                raise ValueError(f"{owner}() takes {alias}= or {field}=, the same field: give one.")
            kwargs[field] = kwargs.pop(alias)
    given = {key: kwargs.pop(key) for key in list(kwargs) if key in fields}
    unknown = sorted(set(kwargs) - {"name", "trainable"})
    if unknown:
        raise ValueError(
            f"Unknown {owner} argument(s) {', '.join(map(repr, unknown))}. Valid ones: "
            f"{', '.join(fields)}, and config, dtype, name, trainable{note}."
        )
    return vit_config(config, given)


def merge_schedule(r, num_layers):
    """Tokens removed in each of `num_layers` blocks, as ToMe's ``parse_r``:
    an int: that many in every block; a list or tuple of ints: one per block,
    a shorter one padded with zeros.

    Returns:
        A tuple of `num_layers` ints.
    """
    def count(value):
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0

    if count(r):
        return (int(r),) * num_layers
    if isinstance(r, (list, tuple)) and all(count(v) for v in r):
        if len(r) > num_layers:
            raise ValueError(
                f"token_merging={list(r)} gives {len(r)} blocks' counts, and the model has "
                f"{num_layers} blocks: give at most {num_layers} (missing ones are 0).")
        return tuple(int(v) for v in r) + (0,) * (num_layers - len(r))
    raise ValueError(
        f"token_merging must be an int >= 0 (the tokens merged away in every block) or a list "
        f"of them, one per block (ToMe's r), got {r!r}.")



def is_int(value, at_least=None):
    """Whether `value` is an integer (a Python or NumPy int, not a bool), and
    at least `at_least` when given: the package's one check of a count
    (``is_int(v, 1)``: a positive integer)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        return False
    return at_least is None or value >= at_least


def pair(value, name):
    """`value` as a tuple of two positive ints (an int gives ``(v, v)``); a
    ValueError names the argument otherwise."""
    if is_int(value):
        value = (value, value)
    try:
        value = tuple(value)
    except TypeError:
        value = (value,)
    if len(value) != 2 or not all(is_int(v, 1) for v in value):
        raise ValueError(
            f"`{name}` must be a positive int or a pair of positive ints, got {value!r}."
        )
    return tuple(int(v) for v in value)


def standardize_data_format(value):
    """`value`, or Keras's image data format when None, checked."""
    import keras  # here alone: the training configs import this module without Keras

    value = value or keras.config.image_data_format()
    if value not in ("channels_last", "channels_first"):
        raise ValueError(
            f"`data_format` must be 'channels_last' or 'channels_first', got {value!r}."
        )
    return value


def _as_tuple(value):
    return value if isinstance(value, tuple) else (value,)


def _per_channel(name, value, channels):
    """`value` as a float, or a tuple of `channels` floats (a list, as JSON
    gives it back, becomes a tuple)."""
    if is_number(value):
        return float(value)
    try:
        values = tuple(value)
    except TypeError:
        values = None
    if values is None or len(values) != channels or not all(is_number(v) for v in values):
        raise ValueError(f"`{name}` must be a number or {channels} numbers (one per channel), "
                         f"got {value!r}.")
    return tuple(float(v) for v in values)


def is_number(value):
    """Whether `value` is a real number (an int or float; a bool is not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_int(name, value, lowest):
    if not is_int(value, lowest):
        raise ValueError(f"`{name}` must be an int >= {lowest}, got {value!r}.")


def scaling_of_normalization(mean, std, channels, rescale=1 / 255):
    """An image processor's normalisation, ``(pixels * rescale - mean) /
    std``, as a `ViTConfig`'s ``pixel_scale`` (``rescale / std``) and
    ``pixel_offset`` (``-mean / std``): one value where the channels agree
    (mean and std 0.5: the paper's 1/127.5 and -1, exactly)."""
    import numpy as np

    mean = np.broadcast_to(np.asarray(mean, np.float64), (channels,))
    std = np.broadcast_to(np.asarray(std, np.float64), (channels,))

    def one_or_each(values):
        return float(values[0]) if np.all(values == values[0]) else tuple(float(v) for v in values)

    return dict(pixel_scale=one_or_each(rescale / std), pixel_offset=one_or_each(-mean / std))


def mean_and_std(config, rescale=1 / 255):
    """`scaling_of_normalization`'s inverse for a `ViTConfig`: the per-channel mean and
    std of pixels in [0, 1] (``rescale`` 1/255) that give its scaling."""
    import numpy as np

    scale = np.broadcast_to(np.asarray(config.pixel_scale, np.float64), (config.num_channels,))
    offset = np.broadcast_to(np.asarray(config.pixel_offset, np.float64), (config.num_channels,))
    std = rescale / scale
    return [float(v) for v in -offset * std], [float(v) for v in std]
