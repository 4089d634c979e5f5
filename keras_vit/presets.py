"""The model variants of the paper (Table 1) and its hybrids, and the ViT
family's released shapes (DeiT, DINOv2, DINOv3, CLIP, SigLIP, SigLIP 2 NaFlex), as data."""

from keras_vit.config import vit_config

_BASE = dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=3072)
_SIZES = {
    "Ti": dict(hidden_dim=192, num_layers=12, num_heads=3, mlp_dim=768),
    "S": dict(hidden_dim=384, num_layers=12, num_heads=6, mlp_dim=1536),
    "B": _BASE,
    "L": dict(hidden_dim=1024, num_layers=24, num_heads=16, mlp_dim=4096),
    "H": dict(hidden_dim=1280, num_layers=32, num_heads=16, mlp_dim=5120),
}


def _vit(size, patch, description):
    return {
        "paper_name": f"ViT-{size}/{patch}",
        "description": description,
        "config": dict(**_SIZES[size], patch_size=patch),
    }


PRESETS = {
    "vit_ti16": _vit("Ti", 16, "ViT-Tiny, 16x16 patches (DeiT / AugReg size)."),
    "vit_s16": _vit("S", 16, "ViT-Small, 16x16 patches (AugReg size)."),
    "vit_s32": _vit("S", 32, "ViT-Small, 32x32 patches (AugReg size)."),
    "vit_b8": _vit("B", 8, "ViT-Base, 8x8 patches (AugReg)."),
    "vit_b16": _vit("B", 16, "ViT-Base, 16x16 patches (Table 1)."),
    "vit_b32": _vit("B", 32, "ViT-Base, 32x32 patches (Table 1)."),
    "vit_l16": _vit("L", 16, "ViT-Large, 16x16 patches (Table 1)."),
    "vit_l32": _vit("L", 32, "ViT-Large, 32x32 patches (Table 1)."),
    "vit_h14": _vit("H", 14, "ViT-Huge, 14x14 patches (Table 1)."),
    "r50_vit_b16": {
        "paper_name": "R50+ViT-B/16",
        "description": "Hybrid: BiT ResNet-50 stem (stages 3, 4, 9; stride 16), "
        "then ViT-B on 1x1 patches of its feature map (Sec. 3.1).",
        "config": dict(**_BASE, patch_size=1, resnet_block_units=(3, 4, 9)),
    },
    "r_vit_ti16": {
        "paper_name": "R+Ti/16",
        "description": "Hybrid (AugReg): the BiT root alone (no stages; stride 4), then "
        "ViT-Ti on 8x8 patches of its feature map (vit_jax's R+ViT-Ti_16).",
        "config": dict(**_SIZES["Ti"], patch_size=8, resnet_block_units=()),
    },
    "r26_vit_s32": {
        "paper_name": "R26+S/32",
        "description": "Hybrid (AugReg): BiT ResNet-26 (stages 2, 2, 2, 2; stride 32), "
        "then ViT-S on 1x1 patches.",
        "config": dict(**_SIZES["S"], patch_size=1, resnet_block_units=(2, 2, 2, 2)),
    },
    "r50_vit_l32": {
        "paper_name": "R50+L/32",
        "description": "Hybrid (AugReg): BiT ResNet-50 (stages 3, 4, 6, 3; stride 32), "
        "then ViT-L on 1x1 patches.",
        "config": dict(**_SIZES["L"], patch_size=1, resnet_block_units=(3, 4, 6, 3)),
    },
}


def _family(paper_name, description, **config):
    return {"paper_name": paper_name, "description": description, "config": config}


# DeiT, distilled (Touvron et al., ICML 2021): a distillation token and head;
# timm and Hugging Face run erf GELU.
_DEIT = dict(patch_size=16, distillation=True, gelu_approximate=False)
# DINOv2 (Oquab et al., 2023): patch 14 at 518 px, LayerScale, erf GELU,
# the normalised [class] token as features; the giant's MLP is SwiGLU
# ((int(4 * 1536 * 2 / 3) + 7) // 8 * 8 = 4096 wide).
_DINOV2 = dict(patch_size=14, image_size=518, layer_scale_init=1.0, gelu_approximate=False,
               num_classes=0)
_GIANT = dict(hidden_dim=1536, num_layers=40, num_heads=24, mlp_dim=4096, mlp_activation="swiglu")
# DINOv3 (Siméoni et al., arXiv:2508.10104, 2025): patch 16, 2-D rotary
# position embeddings (rope_theta 100), 4 registers, LayerScale, a key
# projection without bias, LayerNorm epsilon 1e-5, erf GELU; the features are
# the normalised [class] token. S+, H+ and 7B have a gated MLP (SwiGLU), 7B
# no query, key or value biases. The sizes of transformers'
# convert_dinov3_vit_to_hf.py; 224 px, their config.json's (any size runs).
_DINOV3 = dict(patch_size=16, image_size=224, position_embedding="rope", num_registers=4,
               layer_scale_init=1.0, key_bias=False, layer_norm_epsilon=1e-5,
               gelu_approximate=False, num_classes=0)
_DINOV3_SIZES = {  # preset -> (paper name, size)
    "s16": ("ViT-S/16", dict(hidden_dim=384, num_layers=12, num_heads=6, mlp_dim=1536)),
    "s16plus": ("ViT-S+/16", dict(hidden_dim=384, num_layers=12, num_heads=6, mlp_dim=1536,
                                  mlp_activation="swiglu")),
    "b16": ("ViT-B/16", dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=3072)),
    "l16": ("ViT-L/16", dict(hidden_dim=1024, num_layers=24, num_heads=16, mlp_dim=4096)),
    "h16plus": ("ViT-H+/16", dict(hidden_dim=1280, num_layers=32, num_heads=20, mlp_dim=5120,
                                  mlp_activation="swiglu")),
    "7b16": ("ViT-7B/16", dict(hidden_dim=4096, num_layers=40, num_heads=32, mlp_dim=8192,
                               mlp_activation="swiglu", qkv_bias=False, key_bias=True)),
}
# CLIP's image tower (Radford et al., 2021), OpenAI's weights: a LayerNorm
# before the encoder, no patch bias, QuickGELU, epsilon 1e-5; the head is the
# projection into the joint embedding.
_CLIP = dict(norm_pre=True, patch_bias=False, mlp_activation="quick_gelu", layer_norm_epsilon=1e-5)
# SigLIP's image tower (Zhai et al., ICCV 2023): no [class] token, MAP
# pooling, tanh GELU; its features are the embedding.
_SIGLIP = dict(pooling="map", num_classes=0, patch_size=16)

# SigLIP 2's NaFlex image towers (Tschannen et al., arXiv:2502.14786, 2025): SigLIP's
# shape taking images of any size and aspect ratio (docs/naflex.md), a 16 x 16 position
# table resized to each image's grid, 256 patches per image by default.
_SIGLIP2_NAFLEX = dict(pooling="map", num_classes=0, patch_size=16, image_size=256, naflex=True,
                       max_num_patches=256)
# AIMv2's image encoders (Fini et al., arXiv:2411.14402, CVPR 2025), timm's aimv2_*: RMSNorm
# (epsilon 1e-5, also of the patch embeddings), a SwiGLU MLP, no biases but the patch
# embedding's, no [class] token; the features are the tokens' mean. Sizes as timm's.
_AIMV2 = dict(patch_size=14, image_size=224, norm_type="rms_norm", norm_bias=False, patch_norm=True,
              mlp_activation="swiglu", qkv_bias=False, out_bias=False, mlp_bias=False, pooling="gap",
              layer_norm_epsilon=1e-5, num_classes=0)
_AIMV2_SIZES = {  # preset -> (name, size)
    "l14": ("AIMv2-L/14", dict(hidden_dim=1024, num_layers=24, num_heads=8, mlp_dim=2816)),
    "h14": ("AIMv2-H/14", dict(hidden_dim=1536, num_layers=24, num_heads=12, mlp_dim=4096)),
    "1b14": ("AIMv2-1B/14", dict(hidden_dim=2048, num_layers=24, num_heads=16, mlp_dim=5632)),
    "3b14": ("AIMv2-3B/14", dict(hidden_dim=3072, num_layers=24, num_heads=24, mlp_dim=8192)),
}
# The Perception Encoder's core image towers (Bolya et al., arXiv:2504.13181, 2025), timm's
# vit_pe_core_*: a learned table beside 2-D rotary embeddings on the patch index grid (offset 1,
# columns first, rescaled to the grid it was trained on), a LayerNorm (epsilon 1e-5) before the
# encoder and no patch bias, an 8-head attention-pooling head beside the [class] token, and the
# CLIP projection as the head (timm's). Sizes as timm's.
_PE_CORE = dict(position_embedding="learned_rope", rope_grid="index", rope_grid_offset=1.0,
                rope_grid_indexing="xy", rope_theta=10000.0, norm_pre=True, patch_bias=False,
                layer_norm_epsilon=1e-5, gelu_approximate=False, pooling="map", pooling_num_heads=8,
                class_token=True)
_PE_CORE_SIZES = {  # preset -> (name, size)
    "t16": ("PE-Core T/16", dict(hidden_dim=192, num_layers=12, num_heads=3, mlp_dim=768, patch_size=16,
                                 image_size=384, rope_reference_grid=(24, 24), num_classes=512)),
    "s16": ("PE-Core S/16", dict(hidden_dim=384, num_layers=12, num_heads=6, mlp_dim=1536, patch_size=16,
                                 image_size=384, rope_reference_grid=(24, 24), num_classes=512)),
    "b16": ("PE-Core B/16", dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=3072, patch_size=16,
                                 image_size=224, rope_reference_grid=(14, 14), num_classes=1024)),
    "l14": ("PE-Core L/14", dict(hidden_dim=1024, num_layers=24, num_heads=16, mlp_dim=4096, patch_size=14,
                                 image_size=336, rope_reference_grid=(24, 24), num_classes=1024)),
    # G/14: no [class] token, no grid offset, its pooling MLP 4x wide where the blocks' are 8960
    "g14": ("PE-Core G/14", dict(hidden_dim=1536, num_layers=50, num_heads=16, mlp_dim=8960, patch_size=14,
                                 image_size=448, rope_reference_grid=(32, 32), num_classes=1280,
                                 class_token=None, rope_grid_offset=0.0, pooling_mlp_dim=6144)),
}
# EVA-02 (Fang et al., arXiv:2303.11331, 2023), timm's eva02_*_patch14_224: a learned table
# beside 2-D rotary embeddings on the patch index grid (rescaled to 16 x 16), EvaAttention (a
# query and value bias, no key bias), a SwiGLU MLP (B and L: with a LayerNorm inside), the
# patch tokens' mean beside the [class] token with fc_norm; its masked-image pre-training's
# features. Sizes as timm's.
_EVA02 = dict(patch_size=14, image_size=224, position_embedding="learned_rope", rope_grid="index",
              rope_reference_grid=(16, 16), rope_theta=10000.0, key_bias=False, mlp_activation="swiglu",
              gelu_approximate=False, pooling="gap", fc_norm=True, class_token=True, num_classes=0)
_EVA02_SIZES = {  # preset -> (name, size)
    "t14": ("EVA-02-Ti/14", dict(hidden_dim=192, num_layers=12, num_heads=3, mlp_dim=512)),
    "s14": ("EVA-02-S/14", dict(hidden_dim=384, num_layers=12, num_heads=6, mlp_dim=1024)),
    "b14": ("EVA-02-B/14", dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=2048, mlp_norm=True)),
    "l14": ("EVA-02-L/14", dict(hidden_dim=1024, num_layers=24, num_heads=16, mlp_dim=2730, mlp_norm=True)),
}
# EVA-02's CLIP image towers (EVA-CLIP, Sun et al., arXiv:2303.15389, 2023), timm's
# eva02_*_clip_*: EVA-02 B and L's blocks with a LayerNorm of the attention heads' outputs
# (sub-LN), the [class] token, the CLIP projection as the head. Sizes as timm's.
_EVA02_CLIP = dict(_EVA02, pooling="token", fc_norm=False, class_token=None, mlp_norm=True, attention_norm=True)
_EVA02_CLIP_SIZES = {  # preset -> (name, size)
    "b16": ("EVA02-CLIP-B/16", dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=2048, patch_size=16,
                                    num_classes=512)),
    "l14": ("EVA02-CLIP-L/14", dict(hidden_dim=1024, num_layers=24, num_heads=16, mlp_dim=2730, num_classes=768)),
    "l14_336": ("EVA02-CLIP-L/14@336", dict(hidden_dim=1024, num_layers=24, num_heads=16, mlp_dim=2730,
                                            image_size=336, num_classes=768)),
}
# The Perception Encoder's spatial towers (timm's vit_pe_spatial_*): PE core's without the
# attention-pooling head and without a final norm, aligned for dense features; headless.
_PE_SPATIAL = dict(_PE_CORE, pooling="gap", pooling_num_heads=None, final_norm=False, num_classes=0,
                   rope_reference_grid=(32, 32))
_PE_SPATIAL_SIZES = {  # preset -> (name, size)
    "t16": ("PE-Spatial T/16", dict(hidden_dim=192, num_layers=12, num_heads=3, mlp_dim=768, patch_size=16,
                                    image_size=512)),
    "s16": ("PE-Spatial S/16", dict(hidden_dim=384, num_layers=12, num_heads=6, mlp_dim=1536, patch_size=16,
                                    image_size=512)),
    "b16": ("PE-Spatial B/16", dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=3072, patch_size=16,
                                    image_size=512)),
    "l14": ("PE-Spatial L/14", dict(hidden_dim=1024, num_layers=24, num_heads=16, mlp_dim=4096, patch_size=14,
                                    image_size=448)),
    # G/14: no [class] token, no grid offset, LayerScale
    "g14": ("PE-Spatial G/14", dict(hidden_dim=1536, num_layers=50, num_heads=16, mlp_dim=8960, patch_size=14,
                                    image_size=448, class_token=None, rope_grid_offset=0.0,
                                    layer_scale_init=0.1)),
}
# C-RADIO (Ranzinger et al., CVPR 2024; v3: Heinrich et al., arXiv:2412.07679), timm's
# vit_*_radio_v3 and _v4: a plain ViT distilled from several teachers, its summary tokens the
# [class] token and registers (7 in v3, 9 in v4; timm keeps all but the first as registers), a
# table of the patches alone, no final norm; headless, the [class] token as the features.
_RADIO = dict(patch_size=16, image_size=512, final_norm=False, gelu_approximate=False, num_classes=0)
_RADIO_SIZES = {  # preset -> (name, size)
    "v3_b16": ("C-RADIOv3-B", dict(**_BASE, num_registers=7, layer_scale_init=1e-5)),
    "v3_l16": ("C-RADIOv3-L", dict(**_SIZES["L"], num_registers=7, layer_scale_init=1e-5)),
    "v3_h16": ("C-RADIOv3-H", dict(hidden_dim=1280, num_layers=32, num_heads=16, mlp_dim=5120, num_registers=7)),
    "v3_g16": ("C-RADIOv3-g", dict(hidden_dim=1536, num_layers=40, num_heads=24, mlp_dim=6144, num_registers=7)),
    "v4_so400m16": ("C-RADIOv4-SO400M", dict(hidden_dim=1152, num_layers=27, num_heads=16, mlp_dim=4304,
                                             num_registers=9)),
    "v4_h16": ("C-RADIOv4-H", dict(hidden_dim=1280, num_layers=32, num_heads=16, mlp_dim=5120, num_registers=9)),
}
FAMILY_PRESETS = {
    "deit_ti16_distilled": _family("DeiT-Ti/16 distilled", "DeiT-Tiny with distillation token.",
                                   **_SIZES["Ti"], **_DEIT),
    "deit_s16_distilled": _family("DeiT-S/16 distilled", "DeiT-Small with distillation token.",
                                  **_SIZES["S"], **_DEIT),
    "deit_b16_distilled": _family("DeiT-B/16 distilled", "DeiT-Base with distillation token.",
                                  **_BASE, **_DEIT),
    **{f"dinov2_{size.lower()}14{'_reg4' if registers else ''}": _family(
        f"DINOv2 ViT-{size}/14" + (" registers" if registers else ""),
        f"DINOv2 ViT-{size}/14 features" + (" with 4 registers (Darcet et al., ICLR 2024)."
                                             if registers else "."),
        **(_GIANT if size == "g" else _SIZES[size]), **_DINOV2, num_registers=4 * registers)
       for registers in (False, True) for size in ("S", "B", "L", "g")},
    **{f"dinov3_{size}": _family(
        f"DINOv3 {name}", f"DINOv3 {name} features" + (" (distilled from ViT-7B/16)."
                                                         if size != "7b16" else "."),
        **{**_DINOV3, **shape})
       for size, (name, shape) in _DINOV3_SIZES.items()},
    "clip_b32": _family("CLIP ViT-B/32", "CLIP's image tower, B/32, 512-d embedding.",
                        **_BASE, patch_size=32, num_classes=512, **_CLIP),
    "clip_b16": _family("CLIP ViT-B/16", "CLIP's image tower, B/16, 512-d embedding.",
                        **_BASE, patch_size=16, num_classes=512, **_CLIP),
    "clip_l14": _family("CLIP ViT-L/14", "CLIP's image tower, L/14, 768-d embedding.",
                        **_SIZES["L"], patch_size=14, num_classes=768, **_CLIP),
    "clip_l14_336": _family("CLIP ViT-L/14@336", "CLIP's image tower, L/14 at 336 px.",
                            **_SIZES["L"], patch_size=14, image_size=336, num_classes=768, **_CLIP),
    "siglip_b16": _family("SigLIP ViT-B/16", "SigLIP's image tower, B/16 (768-d embedding).",
                          **_BASE, **_SIGLIP),
    "siglip_l16": _family("SigLIP ViT-L/16", "SigLIP's image tower, L/16 at 256 px.",
                          **_SIZES["L"], image_size=256, **_SIGLIP),
    "siglip_so400m14": _family("SigLIP So400m/14", "SigLIP's shape-optimised image tower "
                               "(Alabdulmohsin et al., NeurIPS 2023); its 384 px release sees "
                               "27 x 27 patches, 378 px.",
                               hidden_dim=1152, num_layers=27, num_heads=16, mlp_dim=4304,
                               patch_size=14, image_size=378, pooling="map", num_classes=0),
    **{f"aimv2_{size}": _family(name, f"AIMv2 {name} image encoder features (224 px; 336 and 448 px "
                                         "releases with the same shape).", **{**_AIMV2, **shape})
       for size, (name, shape) in _AIMV2_SIZES.items()},
    **{f"eva02_{size}": _family(name, f"{name} masked-image pre-trained features (224 px).",
                                **{**_EVA02, **shape})
       for size, (name, shape) in _EVA02_SIZES.items()},
    **{f"eva02_clip_{size}": _family(name, f"{name} image tower: its CLIP embedding as the head.",
                                     **{**_EVA02_CLIP, **shape})
       for size, (name, shape) in _EVA02_CLIP_SIZES.items()},
    **{f"pe_core_{size}": _family(name, f"Perception Encoder {name} image tower: its CLIP embedding "
                                        "as the head.", **{**_PE_CORE, **shape})
       for size, (name, shape) in _PE_CORE_SIZES.items()},
    **{f"pe_spatial_{size}": _family(name, f"Perception Encoder {name} image tower: dense features "
                                           "(no final norm), the patch tokens' mean.", **{**_PE_SPATIAL, **shape})
       for size, (name, shape) in _PE_SPATIAL_SIZES.items()},
    **{f"radio_{size}": _family(name, f"{name} backbone: agglomerative features (the [class] token; "
                                      "dense features from the patch tokens), 512 px.", **{**_RADIO, **shape})
       for size, (name, shape) in _RADIO_SIZES.items()},
    "siglip2_b16": _family("SigLIP 2 ViT-B/16 NaFlex", "SigLIP 2's NaFlex image tower, B/16: "
                           "images at their own aspect ratio, up to 256 patches.",
                           **_BASE, **_SIGLIP2_NAFLEX),
    "siglip2_so400m16": _family("SigLIP 2 So400m/16 NaFlex", "SigLIP 2's shape-optimised NaFlex "
                                "image tower, So400m/16: images at their own aspect ratio, up to "
                                "256 patches.", hidden_dim=1152, num_layers=27, num_heads=16,
                                mlp_dim=4304, **_SIGLIP2_NAFLEX),
}
PRESETS.update(FAMILY_PRESETS)


def _key(name):
    return name.lower().replace("-", "").replace("/", "").replace("+", "_").replace("_", "")


_ALIASES = {}
for _name, _preset in PRESETS.items():
    _ALIASES[_key(_name)] = _name
    _ALIASES[_key(_preset["paper_name"])] = _name


def preset_name(name):
    """Our name of a preset given by our name or the paper's (``"ViT-B/16"``
    -> ``"vit_b16"``).

    Raises:
        ValueError: an unknown preset; the message lists the known ones.
    """
    key = _ALIASES.get(_key(str(name)))
    if key is None:
        known = ", ".join(f"{n} ({p['paper_name']})" for n, p in PRESETS.items())
        raise ValueError(f"Unknown preset {name!r}. Known presets: {known}.")
    return key


def preset_config(name, **overrides):
    """The `keras_vit.ViTConfig` of a preset, by our name or the paper's
    name, with `overrides` (ViT arguments) replaced; the arguments the preset
    does not set keep `ViTConfig`'s defaults (224 px, 1000 classes).

    Examples:
        ```python
        from keras_vit.presets import preset_config

        config = preset_config("R50+ViT-B/16")
        print(config.hidden_dim, config.patch_size, config.resnet_block_units)   # -> 768 (1, 1) (3, 4, 9)
        print(preset_config("vit_b16", image_size=384).grid_size)               # -> (24, 24)
        ```
    """
    return vit_config(None, {**PRESETS[preset_name(name)]["config"], **overrides})


def count_params(config=None, **fields):
    """The parameter count of a ViT, without building it.

    Args:
        config: a `keras_vit.ViTConfig`, or None for one of `fields`.
        **fields: `ViTConfig` fields (replacing those of `config`).

    Examples:
        ```python
        from keras_vit import ViT
        from keras_vit.presets import count_params, preset_config

        args = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                    mlp_dim=32, num_classes=5, pooling="map", num_registers=2)
        assert count_params(**args) == ViT(**args).count_params()
        print(count_params(preset_config("vit_b16", image_size=384, num_classes=10)))   # -> 86098186
        ```
    """
    return vit_config(config, fields).num_params


def presets():
    """Every preset: name -> paper name, description, config and parameter
    count (at 224 px with a 1000-class head).

    Examples:
        ```python
        import keras_vit

        presets = keras_vit.presets()
        print(len(presets))   # -> 66
        print([name for name in sorted(presets) if name.startswith(("vit", "r_", "r26", "r50"))])
        # -> ['r26_vit_s32', 'r50_vit_b16', 'r50_vit_l32', 'r_vit_ti16', 'vit_b16', 'vit_b32',
        # ->  'vit_b8', 'vit_h14', 'vit_l16', 'vit_l32', 'vit_s16', 'vit_s32', 'vit_ti16']
        print(presets["vit_b16"]["paper_name"], presets["vit_b16"]["params"])   # -> ViT-B/16 86567656
        ```
    """
    return {
        name: {**preset, "config": dict(preset["config"]), "params": count_params(**preset["config"])}
        for name, preset in PRESETS.items()
    }
