"""What each checkpoint format holds of a `ViTConfig`, field by field (`TABLE`).

A writer refuses a model by this table before anything is written (`refusal`); a field without an entry is
refused, and ``tests/test_capabilities.py`` fails until it has one, so a new option is never silently dropped.
docs/checkpoints.md shows the table (`markdown`).
"""

import dataclasses

from keras_vit.config import FIELDS
from keras_vit.config import ViTConfig
from keras_vit.weights.formats import FORMATS
from keras_vit.weights.formats import Column
from keras_vit.weights.timm import written_epsilon


# Every format's columns (`keras_vit.weights.formats.FORMATS`), and `.keras`
COLUMNS = {**{name: column for format in FORMATS.values() for name, column in format.columns.items()},
           "keras": Column("`.keras`", "a .keras file", "Keras")}
# the columns a TABLE row names; "keras" is added below, and "hf_siglip2"'s own entries (`_SIGLIP2`)
_FORMATS = tuple(f for f in COLUMNS if f != "keras")
ENTRY_KINDS = ("written", "read", "refused", "loading", "dropped", "with")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One field in one format.

    Attributes:
        kind: ``"written"`` (written and read back; `checks` refuse the values it cannot hold), ``"read"``
            (read from the format's files, refused on writing), ``"refused"`` (neither; a value other than the
            default is refused), ``"loading"`` (not in the files: chosen when loading, e.g. a dropout rate),
            ``"dropped"`` (metadata the format has no place for: written without it) or ``"with"`` (decided by
            the entry of the field `note` names).
        checks: ``(bad, why, instead)`` triples: ``bad(config)`` refuses with `why` (``{c}``: the config,
            ``{reader}``: the format's owner; or ``why(config)``, that text) and `instead`, what to do.
        note: the docs' words; for ``"with"``, the other field.
        values: for ``"written"``: changes of a small model that the format writes, for the round-trip test.
    """

    kind: str
    checks: tuple = ()
    note: str = ""
    values: tuple = ()


def written(*checks, note="", values=()):
    """A field the format writes: all its values but those `checks` refuse."""
    return Entry("written", checks, note, values)


def read(why, instead):
    """A field the format's files give, which its writer refuses (`why`, `instead`)."""
    return Entry("read", ((None, why, instead),))


def refused(why, instead):
    """A field the format has no place for: a value other than the default is refused."""
    return Entry("refused", ((None, why, instead),))


def writes(**change):
    """A field the format writes, all its values; `change` of a small model
    is written and read back by the round-trip test."""
    return Entry("written", values=(change,))


LOADING = Entry("loading", note="chosen when loading")
INITIALIZER = Entry("loading", note="an initializer: no file holds it")
W = written()


def dropped(note):
    """Metadata the format has no place for; written without it (`note`: why)."""
    return Entry("dropped", note=note)


def every(entry, **others):
    """A row: `entry` in every column but `others` (column -> Entry); the
    ``"keras"`` column is added below, and ``"hf_siglip2"``'s own entries (`_SIGLIP2`)."""
    return {**dict.fromkeys(_FORMATS, entry), **others}


def with_(field):
    """A field decided by `field`'s entry (``rope_theta`` by ``position_embedding``'s)."""
    return Entry("with", note=field)


TIMM = "Write it with format='timm', which has it."
KERAS = "Keep it as a .keras file (`model.save`)."
NPZ = "Write it with format='npz'."
HUB_FIX = "Write it with format='timm' or 'npz', where they apply."
DINOV2_READ = "Write it with format='timm' or 'keras_hub'."
_FIXED_SIZE = ("Write its fixed-size model (`model.with_config(naflex=False, max_num_patches=None)`) "
               "in a format that has it, or keep it as a .keras file (`model.save`).")


# Family options that formats have no key for: field -> why, in every column that refuses it
# (instead: timm's, unless said)
_NO_KEY = {
    "num_registers": "it has {c.num_registers} register tokens, which {reader} has no key for",
    "layer_scale_init": "it has LayerScale (layer_scale_init), which {reader} has no key for",
    "qk_norm": "qk_norm, which {reader} does not have",
    "norm_pre": "norm_pre (CLIP's LayerNorm before the encoder), which {reader} does not have",
    "fc_norm": "fc_norm, which {reader} does not have",
    "patch_bias": "its patch embedding has no bias (patch_bias=False), which {reader} requires",
    "mlp_bias": "its MLP has no biases (mlp_bias=False), which {reader} requires",
    "norm_bias": "its LayerNorms have no bias (norm_bias=False, ViT-22B's), which {reader} requires",
    "distillation": "distillation (DeiT's second token and head), which {reader} does not have",
    "class_token": "class_token={c.class_token} with {c.pooling!r} pooling, which {reader} does not have",
    "key_bias": "its key projection has no bias (key_bias=False), which {reader} requires",
    "norm_type": "its norms are RMSNorms (norm_type='rms_norm', AIMv2's), which {reader} does not have",
    "patch_norm": "a norm of its patch embeddings (patch_norm, AIMv2's), which {reader} does not have",
    "out_bias": "its attention output has no bias (out_bias=False), which {reader} requires",
    "mlp_norm": "a norm inside its MLP (mlp_norm, EVA-02's), which {reader} does not have",
    "attention_norm": "a norm of its attention heads' outputs (attention_norm, EVA-CLIP's), which {reader} "
                      "does not have",
    "final_norm": "no final norm (final_norm=False: RADIO's, PE's spatial towers'), which {reader} has always",
}
_REGISTERS, _LAYER_SCALE, _QK_NORM, _NORM_PRE, _FC_NORM, _PATCH_BIAS, _DISTILLATION, _CLASS_TOKEN = (
    refused(_NO_KEY[f], TIMM) for f in ("num_registers", "layer_scale_init", "qk_norm", "norm_pre", "fc_norm",
                                        "patch_bias", "distillation", "class_token"))
_NORM_BIAS = refused(_NO_KEY["norm_bias"], "Write it with format='npz', which has it; else keep it "
                     "as a .keras file (`model.save`).")
_MLP_ACTIVATION = refused("mlp_activation={c.mlp_activation!r}, which {reader} does not have", TIMM)
_KEY_BIAS = refused(_NO_KEY["key_bias"], "DINOv3's formats have it (with rotary position embeddings); "
                    "else keep it as a .keras file (`model.save`).")
# AIMv2's options (timm's aimv2_*): a small model's change that timm writes
_AIMV2 = dict(norm_type="rms_norm", norm_bias=False, patch_norm=True, mlp_activation="swiglu",
              layer_norm_epsilon=1e-5, out_bias=False, mlp_bias=False, qkv_bias=False, pooling="gap")
_ROPE = "rotary position embeddings (position_embedding={c.position_embedding!r}), which {reader} does not have"
# The Perception Encoder's options (timm's vit_pe_core_*, an Eva): a small model's change that timm writes
_PE = dict(position_embedding="learned_rope", rope_grid="index", rope_reference_grid=(2, 2),
           rope_grid_offset=1.0, rope_grid_indexing="xy", rope_theta=10000.0, norm_pre=True, patch_bias=False,
           layer_norm_epsilon=1e-5, pooling="map", class_token=True, gelu_approximate=False)
# What keras_vit's ViT has and timm's Eva, as written for EVA-02 and the Perception Encoder, does not
_NOT_EVA = {"mlp_activation": lambda c: c.mlp_activation == "quick_gelu",
            "gelu_approximate": lambda c: c.mlp_activation == "gelu" and c.gelu_approximate,  # Eva's is erf
            "qk_norm": lambda c: c.qk_norm, "distillation": lambda c: c.distillation,
            "norm_type": lambda c: c.norm_type != "layer_norm", "patch_norm": lambda c: c.patch_norm,
            "out_bias": lambda c: not c.out_bias, "mlp_bias": lambda c: not c.mlp_bias,
            "representation_size": lambda c: c.representation_size,
            # Eva's attention-pooling head has a GELU MLP whatever its blocks' MLP
            "pooling": lambda c: c.pooling == "map" and c.mlp_activation == "swiglu"}


def _beside_rope(c):
    """The fields of `c` that timm's Eva of EVA-02 and the Perception Encoder does not have."""
    return [name for name, has in _NOT_EVA.items() if has(c)]


def _beside_rope_refusal(c):
    """Why `c`'s options beside its rotary embeddings are refused: those it has (`_beside_rope`)."""
    return (f"rotary position embeddings beside {', '.join(_beside_rope(c))}, which timm's Eva of "
            "EVA-02 and the Perception Encoder does not have")


# EVA-02's (timm's eva02_*, an Eva): EvaAttention (no key bias), a SwiGLU MLP; B and L's with a
# norm inside it (mlp_norm)
_EVA02 = dict(_PE, norm_pre=False, patch_bias=True, layer_norm_epsilon=1e-6, pooling="gap", fc_norm=True,
              rope_grid_offset=0.0, rope_grid_indexing="ij", key_bias=False, mlp_activation="swiglu")
# timm's rotary ViTs with registers (vit_*_patch16_rope_reg*_gap_256, an Eva): no table, no [class] token
_ROPE_REGISTERS = dict(position_embedding="rope", rope_grid="index", rope_reference_grid=(2, 2), key_bias=False,
                       num_registers=1, pooling="gap", layer_scale_init=1e-5, gelu_approximate=False)
_ROPE_GRID = refused("its rotary embeddings turn on EVA-02's and PE's index grid (rope_grid="
                     "{c.rope_grid!r}, rope_grid_offset, rope_grid_indexing, rope_reference_grid), "
                     "which {reader} does not have", TIMM)
_POOLING_SIZE = refused("its attention-pooling head has its own size (pooling_num_heads="
                        "{c.pooling_num_heads}, pooling_mlp_dim={c.pooling_mlp_dim}, PE's), which "
                        "{reader} does not have", TIMM)
_TO_DINOV3 = ("Write it with format='huggingface' (a DINOv3ViTModel) or 'keras_hub' (a "
              "DINOV3Backbone), which have them.")
_PROJECTION = refused("it has an image projection (projection_dim={c.projection_dim}, CLIP's), which "
                      "{reader} has no key for", KERAS)
_NORMALIZE = refused("it normalises its features before the head (normalize_features, a zero-shot "
                     "classifier's), which {reader} does not do", KERAS)
_HYBRID = refused("it is a hybrid (ResNet stem), which {reader} does not have", NPZ)
_SQUARE = (lambda c: c.patch_size[0] != c.patch_size[1],
           "its patches are {c.patch_size[0]}x{c.patch_size[1]}, and {reader} has square patches")
_DINOV2_ONLY = read("{reader} is read, not written", DINOV2_READ)
_NOT_DINOV2 = refused("{reader} has no such setting", DINOV2_READ)
# DINOv3ViTModel: features, no head
_FEATURES = (lambda c: c.num_classes or c.pooling != "token" or c.representation_size,
             "DINOv3ViTModel gives features (its normalised [class] token) and has no head",
             "Write it headless (`model.with_config(num_classes=0)`), or with format='keras_hub'.")


def _is(backbone):
    """Whether a config is written as keras-hub's `backbone` (``"ViT"``, ``"DINOV2"``, ...)."""
    from keras_vit.weights.keras_hub import backbone_of

    return lambda c: backbone_of(c) == backbone


_DINOV3_HUB, _DINOV2_HUB = _is("DINOV3"), _is("DINOV2")
# keras-hub's DINO backbones are headless: what neither has ([class] token, patch bias, square patches)
_NOT_DINO = (lambda c: c.num_classes or c.pooling != "token" or not c.patch_bias or c.qk_norm or c.norm_pre
             or c.fc_norm or c.distillation or c.patch_size[0] != c.patch_size[1])
_HUB_DINOV3 = (lambda c: _DINOV3_HUB(c) and _NOT_DINO(c),
               "keras-hub's DINOV3Backbone is a headless DINOv3 ([class] token, patch bias, square patches)", HUB_FIX)
_HUB_DINOV2 = (lambda c: _DINOV2_HUB(c) and (_NOT_DINO(c) or c.layer_norm_epsilon != 1e-6 or not c.mlp_bias),
               "keras-hub's DINOV2Backbone is a headless DINOv2 ([class] token, LayerNorm epsilon 1e-6, "
               "biases everywhere, square patches)", HUB_FIX)


def _swiglu_width(c):
    from keras_vit.weights.keras_hub import swiglu_intermediate_dim

    return (_DINOV2_HUB(c) and c.mlp_activation == "swiglu" and swiglu_intermediate_dim(c.mlp_dim) is None)


# field -> {format: Entry}; ".keras" holds everything (added below)
TABLE = {
    "image_size": every(W, hf_dinov2=_DINOV2_ONLY, timm=writes(image_size=(32, 16))),
    "patch_size": every(W, hf_vit=written(_SQUARE + ("Use format='timm'.",)), hf_dinov2=_DINOV2_ONLY,
                        hf_dinov3=written(_SQUARE + (KERAS,))),
    **{field: every(W, hf_dinov2=_DINOV2_ONLY) for field in ("num_layers", "num_heads", "hidden_dim")},
    "mlp_dim": every(
        W, hf_dinov2=_DINOV2_ONLY, keras_hub=written(
            (_swiglu_width, "a SwiGLU width of {c.mlp_dim}, which keras-hub's rounding to multiples "
             "of 8 does not give", HUB_FIX)),
        timm=writes(hidden_dim=88, num_heads=4, mlp_dim=120)),  # 120 / 88 falls short: `timm._ratio`
    "num_classes": every(writes(num_classes=0), hf_dinov2=_DINOV2_ONLY, hf_dinov3=written(_FEATURES),
                         keras_hub=written(_HUB_DINOV3, _HUB_DINOV2, values=(dict(num_classes=0),))),
    "pooling": dict(
        npz=written((lambda c: c.pooling == "none", "pooling='none' (the token sequence) has no "
                     "vit_jax classifier", "Use pooling 'token', 'gap' or 'map'."),
                    values=(dict(pooling="gap"), dict(pooling="map"))),
        hf_vit=written((lambda c: c.pooling != "token", "pooling {c.pooling!r}: Hugging Face's "
                        "ViT classifies the [class] token", "Write it with format='timm' (gap, "
                        "map) or 'npz'.")),
        hf_dinov2=_DINOV2_ONLY, hf_dinov3=written(_FEATURES),
        timm=written((lambda c: c.pooling == "none", "pooling='none' has no timm classifier",
                      "Use another pooling."), values=(dict(pooling="gap"), dict(pooling="map"))),
        keras_hub=written((lambda c: c.pooling not in ("token", "gap") or (
            c.pooling == "gap" and c.uses_class_token), "pooling {c.pooling!r}, which keras-hub's "
            "ViTImageClassifier does not have (gap beside a [class] token neither)", HUB_FIX),
            values=(dict(pooling="gap"),))),
    **{field: every(_POOLING_SIZE, timm=written(
        (lambda c: not c.uses_rope and (c.pooling_num_heads or c.pooling_mlp_dim), "its attention-pooling "
         "head has its own size (pooling_num_heads, pooling_mlp_dim), and timm's VisionTransformer's has "
         "the blocks'; its Eva of the Perception Encoder (rotary embeddings) has its own", KERAS),
        values=(dict(_PE, pooling_num_heads=1, pooling_mlp_dim=24),)))
       for field in ("pooling_num_heads", "pooling_mlp_dim")},
    "representation_size": dict(
        npz=writes(representation_size=8),
        hf_vit=written((lambda c: c.representation_size and c.num_classes, "it has a pre-logits "
                        "layer and a head: ViTForImageClassification classifies the [class] "
                        "token without its pooler", "Drop the head (`model.with_config(num_classes=0)`) to "
                        "write a ViTModel whose pooler is the pre-logits layer, or use format='npz'."),
                       values=(dict(representation_size=8, num_classes=0),)),
        hf_dinov2=_NOT_DINOV2, hf_dinov3=written(_FEATURES),
        timm=read("it has a pre-logits layer, which timm's VisionTransformer no longer has",
                  "Write it with format='npz' or 'huggingface'."),
        keras_hub=written((lambda c: c.representation_size and not c.num_classes, "it has a "
                           "pre-logits layer and no head: a keras-hub ViTBackbone has no pre-logits "
                           "layer", "Write it with a head, or with format='npz'."),
                          values=(dict(representation_size=8),))),
    "projection_dim": every(_PROJECTION, hf_dinov2=_NOT_DINOV2),
    "normalize_features": every(_NORMALIZE, hf_dinov2=_NOT_DINOV2),
    "dropout_rate": every(LOADING, keras_hub=writes(dropout_rate=0.1)),
    "attention_dropout_rate": every(LOADING, keras_hub=writes(attention_dropout_rate=0.1)),
    "drop_path_rate": every(LOADING, keras_hub=Entry("loading", note="DINO presets store it")),
    "layer_norm_epsilon": dict(
        npz=written((lambda c: c.layer_norm_epsilon != 1e-6, "its LayerNorm epsilon is "
                     "{c.layer_norm_epsilon:g}, and vit_jax's is 1e-6", "Use format='huggingface' "
                     "(it stores the epsilon).")),
        hf_vit=writes(layer_norm_epsilon=1e-12), hf_dinov2=_DINOV2_ONLY,
        hf_dinov3=W, keras_hub=writes(layer_norm_epsilon=1e-5),
        timm=written((lambda c: c.layer_norm_epsilon != written_epsilon(c),
                      "its LayerNorm epsilon is {c.layer_norm_epsilon:g}, and timm's ViT uses 1e-6 "
                      "(its CLIP, with norm_pre, 1e-5)", "Use format='huggingface' (it stores the "
                      "epsilon)."))),
    "gelu_approximate": dict(
        npz=written((lambda c: not c.gelu_approximate, "it uses exact (erf) GELU, and vit_jax's code "
                     "runs the tanh approximation", "Use format='timm' or 'huggingface', or accept slightly "
                     "different numbers: `model.with_config(gelu_approximate=True).save_checkpoint(...)`.")),
        hf_vit=writes(gelu_approximate=False), hf_dinov2=_DINOV2_ONLY,
        hf_dinov3=written((lambda c: c.mlp_activation == "gelu" and c.gelu_approximate,
                           "gelu_approximate=True, and DINOv3's MLP is exact GELU (or gated SiLU)",
                           KERAS)),
        timm=writes(gelu_approximate=False),
        keras_hub=written((lambda c: c.gelu_approximate, "it uses tanh GELU (the paper's), and "
                           "keras-hub's ViT the exact (erf) form", "Accept slightly different "
                           "numbers with `model.with_config(gelu_approximate=False).save_checkpoint"
                           "(...)`, or use format='npz'."))),
    "qkv_bias": every(
        writes(qkv_bias=False), hf_dinov2=_DINOV2_ONLY,
        keras_hub=written((lambda c: not c.qkv_bias and not _DINOV3_HUB(c), "qkv_bias=False, and "
                           "keras-hub's use_mha_bias=False also drops the attention output's bias",
                           HUB_FIX))),
    "key_bias": every(
        _KEY_BIAS, hf_dinov2=_NOT_DINOV2, hf_dinov3=writes(key_bias=False),
        timm=written((lambda c: not c.key_bias and not c.uses_rope, "its key projection has no bias "
                      "(key_bias=False), which timm's VisionTransformer requires; its Eva has it beside "
                      "rotary embeddings (EVA-02's)", KERAS)),
        keras_hub=written((lambda c: not c.key_bias and not _DINOV3_HUB(c), "its key projection has "
                           "no bias (key_bias=False), which keras-hub has for DINOv3 (rotary "
                           "position embeddings) only", HUB_FIX))),
    "layer_scale_init": every(
        _LAYER_SCALE, hf_dinov2=_DINOV2_ONLY,
        hf_dinov3=written((lambda c: c.layer_scale_init is None, "it has no LayerScale, which "
                           "DINOv3ViTModel has always", KERAS), values=(dict(layer_scale_init=0.1),)),
        timm=writes(layer_scale_init=0.1),
        keras_hub=written(
            (lambda c: _DINOV2_HUB(c) and c.layer_scale_init is None, "registers without "
             "LayerScale, which keras-hub's DINOV2Backbone has always", HUB_FIX),
            (lambda c: _DINOV3_HUB(c) and c.layer_scale_init is None, "rotary position embeddings "
             "without LayerScale, which keras-hub's DINOV3Backbone has always", HUB_FIX),
            values=(dict(layer_scale_init=1.0, num_classes=0),))),
    "num_registers": every(_REGISTERS, hf_dinov2=_DINOV2_ONLY, hf_dinov3=writes(num_registers=2),
                           timm=written(values=(dict(num_registers=2, layer_scale_init=0.1),
                                                dict(_ROPE_REGISTERS))),
                           keras_hub=writes(num_registers=2, layer_scale_init=1.0, num_classes=0)),
    "position_embedding": dict(
        npz=written((lambda c: c.uses_rope, _ROPE, _TO_DINOV3 + " With a learned table too: " + TIMM),
                    values=(dict(position_embedding="sincos2d", pooling="gap"),)),
        hf_vit=written((lambda c: c.position_embedding == "sincos2d", "its position "
                        "embeddings are sin-cos, not learned", NPZ),
                       (lambda c: c.position_embedding == "learned_rope", _ROPE, TIMM),
                       note="rotary: written as a DINOv3ViTModel"),
        hf_dinov2=_DINOV2_ONLY,
        hf_dinov3=written((lambda c: c.position_embedding == "learned_rope", _ROPE + " beside a learned table",
                           TIMM), note="rotary alone"),
        timm=written((lambda c: c.position_embedding == "sincos2d", "its position embeddings are "
                      "sin-cos; timm's VisionTransformer learns them", NPZ),
                     (lambda c: c.position_embedding == "rope" and c.rope_grid == "centered", "rotary "
                      "position embeddings on DINOv3's centred grid (position_embedding='rope'), which "
                      "timm's Eva does not have", "Write it with format='huggingface' (a DINOv3ViTModel) "
                      "or 'keras_hub' (a DINOV3Backbone)."),
                     (lambda c: c.uses_rope and _beside_rope(c), _beside_rope_refusal, KERAS),
                     values=(dict(_PE), dict(_EVA02), dict(_EVA02, mlp_norm=True))),
        keras_hub=written((lambda c: c.position_embedding == "sincos2d", "its position embeddings "
                           "are sin-cos", "Use format='npz'."),
                          (lambda c: c.position_embedding == "learned_rope", _ROPE, TIMM),
                          values=(dict(position_embedding="rope", layer_scale_init=1.0,
                                       num_classes=0),))),
    "rope_theta": every(with_("position_embedding"), hf_dinov3=W, keras_hub=W, timm=W),
    "rope_grid": every(_ROPE_GRID, timm=written(
        (lambda c: c.uses_rope and c.rope_grid != "index", "its rotary embeddings turn on DINOv3's "
         "centred grid (rope_grid='centered'), and timm's Eva of the Perception Encoder on the "
         "index grid", "Write it with format='huggingface' or 'keras_hub', where they apply."))),
    **{field: every(_ROPE_GRID, timm=with_("rope_grid")) for field in ("rope_grid_offset", "rope_grid_indexing")},
    "rope_reference_grid": every(_ROPE_GRID, timm=written(
        (lambda c: c.uses_rope and c.rope_reference_grid is None and c.layer_scale_init is None, "its "
         "rotary embeddings have no reference grid (rope_reference_grid=None) and it has no LayerScale: "
         "timm's rotary ViTs without a reference grid (vit_*_patch16_rope_*) have LayerScale, which "
         "model_args cannot take away", "Give the grid it was trained on: `model.with_config("
         "rope_reference_grid=model.config.grid_size)` at that size."),
        values=(dict(position_embedding="rope", rope_grid="index", rope_grid_indexing="xy", rope_theta=100.0,
                     layer_scale_init=0.1, gelu_approximate=False),
                dict(position_embedding="learned_rope", rope_grid="index", layer_scale_init=0.1, pooling="gap",
                     fc_norm=True, gelu_approximate=False)))),
    "resnet_block_units": dict(
        npz=writes(image_size=64, patch_size=1, resnet_block_units=(1, 2), resnet_width_factor=0.5),
        hf_vit=_HYBRID, hf_dinov2=_NOT_DINOV2, hf_dinov3=_HYBRID,
        timm=refused("it is a hybrid (ResNet stem); timm keeps those in another model class "
                     "(vision_transformer_hybrid)", NPZ),
        keras_hub=refused("it is a hybrid (ResNet stem)", "Use format='npz'.")),
    "resnet_width_factor": every(with_("resnet_block_units"), npz=W),
    "head_bias_init": every(INITIALIZER),
    "mlp_activation": dict(
        npz=_MLP_ACTIVATION,
        hf_vit=written((lambda c: c.mlp_activation == "swiglu", "mlp_activation='swiglu', which "
                        "Hugging Face's ViT does not have", TIMM),
                       values=(dict(mlp_activation="quick_gelu"),)),
        hf_dinov2=_DINOV2_ONLY,
        hf_dinov3=written((lambda c: c.mlp_activation == "quick_gelu", "mlp_activation='quick_gelu', "
                           "and DINOv3's MLP is exact GELU (or gated SiLU)", KERAS),
                          values=(dict(mlp_activation="swiglu"),)),
        timm=written(values=(dict(mlp_activation="quick_gelu"), dict(mlp_activation="swiglu"))),
        keras_hub=written((lambda c: c.mlp_activation not in ("gelu", "swiglu") or (
            c.mlp_activation == "swiglu" and not _DINOV2_HUB(c) and not _DINOV3_HUB(c)),
            "mlp_activation={c.mlp_activation!r}, which keras-hub's ViT does not have", HUB_FIX))),
    "qk_norm": every(_QK_NORM, hf_dinov2=_NOT_DINOV2, timm=writes(qk_norm=True)),
    "norm_pre": every(
        _NORM_PRE, hf_dinov2=_NOT_DINOV2,
        timm=written((lambda c: c.norm_pre == c.patch_bias, "timm builds a LayerNorm before the "
                      "encoder exactly when the patch embedding has no bias (pre_norm), and this "
                      "model has norm_pre={c.norm_pre}, patch_bias={c.patch_bias}",
                      "Use format='huggingface' or 'npz' where they apply."),
                     values=(dict(norm_pre=True, patch_bias=False, layer_norm_epsilon=1e-5),))),
    "fc_norm": every(_FC_NORM, hf_dinov2=_NOT_DINOV2, timm=writes(fc_norm=True, pooling="gap")),
    "final_norm": every(
        refused(_NO_KEY["final_norm"], TIMM), hf_dinov2=_NOT_DINOV2,
        timm=written(values=(dict(final_norm=False, num_registers=2, layer_scale_init=1e-5),  # RADIO's
                             dict(_PE, pooling="gap", final_norm=False)))),
    "patch_bias": every(_PATCH_BIAS, hf_dinov2=_NOT_DINOV2, timm=with_("norm_pre"),
                        keras_hub=writes(patch_bias=False)),
    "mlp_bias": dict(
        npz=writes(mlp_bias=False, pooling="map"),
        hf_vit=refused(_NO_KEY["mlp_bias"], "Write it with format='npz', which has it."),
        hf_dinov2=_NOT_DINOV2, hf_dinov3=writes(mlp_bias=False),
        timm=with_("out_bias"),
        keras_hub=writes(mlp_bias=False)),
    "norm_bias": every(
        _NORM_BIAS, npz=writes(norm_bias=False, pooling="map"), hf_dinov2=_NOT_DINOV2,
        timm=written((lambda c: not c.norm_bias and c.norm_type != "rms_norm", _NO_KEY["norm_bias"],
                      "Write it with format='npz', which has it."))),
    "norm_type": every(
        refused(_NO_KEY["norm_type"], TIMM), hf_dinov2=_NOT_DINOV2,
        timm=written((lambda c: c.norm_type == "rms_norm" and c.mlp_activation != "swiglu",
                      "its norms are RMSNorms and its MLP is not SwiGLU, and timm's RMSNorm ViT "
                      "(AIMv2's) has a SwiGLU MLP", KERAS),
                     values=(dict(_AIMV2),))),
    "patch_norm": every(
        refused(_NO_KEY["patch_norm"], TIMM), hf_dinov2=_NOT_DINOV2,
        timm=written((lambda c: c.patch_norm and c.norm_type != "rms_norm", "a LayerNorm of its "
                      "patch embeddings, and timm's ViT has one as AIMv2's, an RMSNorm", KERAS),
                     values=(dict(_AIMV2, patch_norm=False),))),
    "mlp_norm": every(
        refused(_NO_KEY["mlp_norm"], TIMM), hf_dinov2=_NOT_DINOV2,
        timm=written((lambda c: c.mlp_norm and not c.uses_rope, "a norm inside its MLP (mlp_norm), which "
                      "timm's VisionTransformer does not have; its Eva has it beside rotary embeddings "
                      "(EVA-02's)", KERAS))),
    "attention_norm": every(
        refused(_NO_KEY["attention_norm"], TIMM), hf_dinov2=_NOT_DINOV2,
        timm=written((lambda c: c.attention_norm and not c.uses_rope, "a norm of its attention heads' "
                      "outputs (attention_norm), which keras_vit writes to timm's Eva only, beside rotary "
                      "embeddings (EVA-02's CLIP towers)", KERAS),
                     values=(dict(_EVA02, mlp_norm=True, attention_norm=True, pooling="token", fc_norm=False,
                                  class_token=None),))),
    "out_bias": every(
        refused(_NO_KEY["out_bias"], TIMM), hf_dinov2=_NOT_DINOV2,
        timm=written((lambda c: c.out_bias != c.mlp_bias, "out_bias={c.out_bias} with "
                      "mlp_bias={c.mlp_bias}, and timm's proj_bias sets both", KERAS),
                     values=(dict(out_bias=False, mlp_bias=False),))),
    "distillation": dict(
        npz=_DISTILLATION, hf_vit=read("distillation (DeiT's second token and head), which "
                                       "{reader} does not write", TIMM),
        hf_dinov2=_NOT_DINOV2, hf_dinov3=_DISTILLATION, timm=writes(distillation=True),
        keras_hub=written(
            (lambda c: c.distills_by_head, "DeiT's two heads averaged (distillation_head=True), and "
             "keras-hub's DeiT classifies the [class] token alone", "Write it with format='timm'."),
            (lambda c: c.distillation and (not c.mlp_bias or not c.patch_bias or c.representation_size),
             "keras-hub's DeiT has neither unbiased MLPs or patches nor a pre-logits layer", HUB_FIX),
            values=(dict(distillation=True, distillation_head=False),))),
    "distillation_head": every(
        with_("distillation"),
        timm=written((lambda c: c.distillation and not c.distillation_head, "its distillation token has no "
                      "head (distillation_head=False), and timm's distilled ViT has both heads", KERAS))),
    "class_token": every(_CLASS_TOKEN, hf_dinov2=_NOT_DINOV2,
                         timm=written(values=(dict(pooling="gap", class_token=True),
                                              dict(pooling="map", class_token=True)))),
    "num_channels": every(W, hf_dinov2=_DINOV2_ONLY),
    "class_names": dict(npz=dropped("vit_jax files hold no class names"),
                        hf_vit=writes(class_names=list("abcde")),
                        hf_dinov2=with_("num_classes"), hf_dinov3=with_("num_classes"),
                        timm=writes(class_names=list("abcde")),
                        keras_hub=dropped("keras-hub presets hold no class names")),
    "head_activation": every(dropped("the format records no output activation"),
                             hf_dinov2=with_("num_classes"), hf_dinov3=with_("num_classes")),
    **{field: every(W, npz=dropped("vit_jax files hold no pixel scaling"), hf_dinov2=_DINOV2_ONLY)
       for field in ("pixel_scale", "pixel_offset")},
    "data_format": every(LOADING, keras_hub=written((lambda c: c.data_format != "channels_last",
                                                     "it takes channels-first images", HUB_FIX))),
    # NaFlex (SigLIP 2's any-size sequences): format="huggingface" writes a Siglip2VisionModel
    # (the "hf_siglip2" column); the other formats have no setting for it
    "naflex": every(refused("it is a NaFlex model (naflex=True), which {reader} has no setting for",
                            _FIXED_SIZE), hf_vit=written(note="NaFlex: written as a Siglip2VisionModel")),
    "max_num_patches": every(with_("naflex")),
    # token merging (ToMe) changes how the model runs, not its weights
    **{field: every(LOADING) for field in ("token_merging", "proportional_attention")},
    # visual prompt tuning (VPT): learned tokens no checkpoint format has a place for
    "prompt_tokens": every(refused(
        "it has {c.prompt_tokens} VPT prompt tokens (prompt_tokens), which {reader} has no place for",
        "Write the base model in this format and the prompts apart (`model.save_adapters(path)`, "
        "docs/fine_tuning.md), or keep it as a .keras file (`model.save`).")),
    "deep_prompts": every(with_("prompt_tokens")),
    "prompt_dropout": every(LOADING),
}


# Hugging Face's Siglip2VisionModel (SigLIP 2 NaFlex, model_type siglip2_vision_model): a NaFlex tower of
# SigLIP's shape: a square position table, a MAP head, no [class] token. Its entries where they are not the
# row's entry of every column (`every`)
_SIGLIP2 = {
    **{field: refused(why, _FIXED_SIZE) for field, why in _NO_KEY.items()},
    "image_size": written((lambda c: c.grid_size[0] != c.grid_size[1], "its position table is "
                           "{c.grid_size[0]}x{c.grid_size[1]} patches, and {reader}'s is a square "
                           "(num_patches = side x side)", "Resample it to a square first "
                           "(`model.with_config(image_size=...)`), or keep it as a .keras file "
                           "(`model.save`).")),
    "patch_size": written(_SQUARE + (KERAS,)),
    "num_classes": written((lambda c: c.num_classes, "Siglip2VisionModel gives features (its "
                            "attention-pooled output) and has no head", "Write it headless "
                            "(`model.with_config(num_classes=0)`), or keep it as a .keras file "
                            "(`model.save`).")),
    "pooling": written((lambda c: c.pooling != "map", "pooling {c.pooling!r}: {reader} pools with "
                        "its attention head (pooling='map')", _FIXED_SIZE)),
    "representation_size": refused("it has a pre-logits layer, which {reader} does not have",
                                   _FIXED_SIZE),
    "layer_norm_epsilon": writes(layer_norm_epsilon=1e-5),
    "gelu_approximate": writes(gelu_approximate=False),
    "mlp_activation": written((lambda c: c.mlp_activation == "swiglu", "mlp_activation='swiglu', "
                               "which {reader} does not have", _FIXED_SIZE),
                              values=(dict(mlp_activation="quick_gelu"),)),
    "qkv_bias": refused("its attention has no query, key and value biases (qkv_bias=False), which "
                        "{reader} requires", _FIXED_SIZE),
    "position_embedding": written((lambda c: c.position_embedding != "learned", "its position embeddings are "
                                   "{c.position_embedding!r}, and {reader}'s a learned table", _FIXED_SIZE)),
    **{field: refused(_ROPE_GRID.checks[0][1], _FIXED_SIZE) for field in ("rope_grid", "rope_grid_offset",
                                                                           "rope_grid_indexing", "rope_reference_grid")},
    **{field: refused(_POOLING_SIZE.checks[0][1], _FIXED_SIZE) for field in ("pooling_num_heads", "pooling_mlp_dim")},
    "resnet_block_units": _HYBRID, "class_names": with_("num_classes"), "head_activation": with_("num_classes"),
    "naflex": written((lambda c: not c.naflex, "it is a fixed-size model, and {reader} takes NaFlex "
                       "sequences", "Make it NaFlex first (`model.with_naflex(max_num_patches)`).")),
    "max_num_patches": writes(max_num_patches=3),
}
for _field, _entries in TABLE.items():
    if _field in _SIGLIP2:
        _entries["hf_siglip2"] = _SIGLIP2[_field]
    _entries["keras"] = W


_DEFAULTS = {field.name: field.default for field in dataclasses.fields(ViTConfig)}


def refusal(config, column):
    """The first thing `column` (a `COLUMNS` key) cannot hold of `config` (a `ViTConfig`), or None.

    Returns:
        None, or ``(why, instead)``: the reason, in the column's words, and
        what to do.
    """
    owner = COLUMNS[column].owner
    for field in FIELDS:
        entry = TABLE.get(field, {}).get(column)
        if entry is None:
            if getattr(config, field) != _DEFAULTS.get(field):
                return (f"{field}={getattr(config, field)!r}, which keras_vit does not map to {owner} yet", KERAS)
            continue
        for bad, why, instead in entry.checks:
            bad = bad or (lambda c, field=field: getattr(c, field) != _DEFAULTS.get(field))
            if bad(config):  # `why`: a text, or a function of the config that gives it
                return (why(config) if callable(why) else why).format(c=config, reader=owner), instead
    return None


def markdown():
    """The table as markdown: a row per field (in `TABLE`'s order), a column per format."""
    cells = {"written": "written", "read": "read; refused on writing", "refused": "refused",
             "loading": "not in the file", "dropped": "dropped"}
    lines = ["| `ViTConfig` field | " + " | ".join(c.title for c in COLUMNS.values()) + " |",
             "|---" * (len(COLUMNS) + 1) + "|"]
    for field in TABLE:
        row = []
        for format in COLUMNS:
            entry = TABLE[field][format]
            text = f"with `{entry.note}`" if entry.kind == "with" else cells[entry.kind]
            if entry.kind == "written" and entry.checks:
                text += " (some values refused)"
            if entry.note and entry.kind != "with":
                text += f": {entry.note}"
            row.append(text)
        lines.append(f"| `{field}` | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
