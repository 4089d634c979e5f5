"""Makes keras_vit/weights/timm_architectures.json, timm's table of the
architectures keras_vit's timm reader looks up, and tests/data/timm/, small
random timm models saved as timm saves them for the hub: of the
newer encoders keras_vit reads, with timm's logits, and of families it
refuses by name.

Made with timm 1.0.31, torch 2.13.0 CPU, as ../shared/tools/timm_reference/README.md says:

    PYTHONPATH="$TIMM_DIR:$PWD/../shared/tools/timm_reference" \\
        .venv/bin/python tests/data/make_timm_architectures.py [NAME ...]

Without names it makes every model and the table; with names (keys of `ARCHITECTURES`),
those models alone. ``pe_core_pool_heads`` was made alone (``... make_timm_architectures.py
pe_core_pool_heads``); the others by a run without names.

**The table** holds every architecture timm registers in its
``vision_transformer``, ``deit`` and ``eva`` modules: the module, the model
class its entry point builds and the arguments it builds it with (the
entry point's ``model_args``; a layer as its name, a ``functools.partial``
as ``{"partial": name, **keywords}``), and the names timm still accepts for
them (``deprecated``: an old name and the ``architecture.tag`` it stands for). The entry points are called with
``build_model_with_cfg`` replaced by a recorder: no model is built.

**The models** (``tests/data/timm/<name>/``: ``config.json`` and
``model.safetensors``, written by timm's own ``save_for_hf``; ``<name>.npz``:
``images`` (2, 32, 32, 3), channels last, and timm's ``logits``): each
architecture's entry point at 32 px in 8x8 patches, 2 blocks, width 32,
4 heads, 5 classes (`SMALL`; an entry's own arguments over them), its weights moved away
from their initial values (`MOVED`).
"""

import functools
import json
import os
import sys

import numpy as np
import torch

import torchvision_standin  # noqa: F401
import timm
from timm.models import _hub
from timm.models import _registry
from timm.models import deit
from timm.models import eva
from timm.models import vision_transformer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "keras_vit", "weights", "timm_architectures.json")
MODELS = os.path.join(ROOT, "tests", "data", "timm")
MODULES = {"vision_transformer": vision_transformer, "deit": deit, "eva": eva}
SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=32, num_heads=4, num_classes=5)
ARCHITECTURES = {  # name: (architecture, its arguments beside SMALL)
    "pe_core": ("vit_pe_core_tiny_patch16_384", dict(attn_pool_num_heads=4, ref_feat_shape=(4, 4))),
    "aimv2": ("aimv2_large_patch14_224", {}),  # RMSNorm, SwiGLU (fc1_g, fc1_x), no biases but the patches'
    # EvaAttention (q, k, v fused; query and value biases), a packed SwiGLU (fc1), rotary + learned table
    "eva02": ("eva02_tiny_patch14_224", {}),
    # q, k, v apart (q_proj, k_proj, v_proj), SwiGLU with a LayerNorm inside (scale_mlp)
    "eva02_mlp_norm": ("eva02_base_patch14_224", {}),
    # PE's spatial tower: no attention pooling, no final norm (use_post_transformer_norm=False)
    "pe_spatial": ("vit_pe_spatial_tiny_patch16_512", dict(ref_feat_shape=(4, 4))),
    # timm's ViT with rotary embeddings alone (Heo et al., 2024): no position table, no reference grid
    "rope_vit": ("vit_small_patch16_rope_224", {}),
    # C-RADIOv3 (Ranzinger et al.) as timm's VisionTransformer keeps it: 7 register tokens beside the
    # [class] token (RADIO's summary tokens past the first), a table of the patches alone, LayerScale,
    # no final norm
    "radio": ("vit_base_patch16_radio_v3", {}),
    # EVA-02's CLIP towers: EVA-02 B's, with a LayerNorm of the attention heads' outputs (scale_attn_inner)
    "eva02_clip": ("eva02_base_patch16_clip_224", {}),
    # timm's rotary ViTs with registers (SBB's vit_*_patch16_rope_reg*_gap_256): EvaAttention, a register token
    # and no [class] token, the patch tokens' mean
    "rope_registers": ("vit_medium_patch16_rope_reg1_gap_256", dict(ref_feat_shape=(4, 4))),
    # PE core as its architecture builds it, 48 wide in 16x16 patches: 4 heads of 12 in the blocks, its
    # attention pool's own 8 heads of 6 (attn_pool_num_heads), too narrow for rotary embeddings, which
    # never reach the pool
    "pe_core_pool_heads": ("vit_pe_core_tiny_patch16_384", dict(embed_dim=48, patch_size=16)),
}

# How far each model's weights are moved (normal noise of this scale): 0.3, and 0.1 for PE's,
# whose logits after its attention pooling and head would otherwise reach 18, where float32
# rounding alone is some 1e-5, and for EVA-02 CLIP's (at 0.3, 4e-6 of rounding on XLA's CPU)
MOVED = {"pe_core": 0.1, "pe_spatial": 0.1, "eva02_clip": 0.1, "pe_core_pool_heads": 0.1}


class _Recorded(Exception):
    pass


def plain(value):
    """`value` as JSON: layers by name, partials as dicts."""
    if isinstance(value, functools.partial):
        return {"partial": plain(value.func), **{k: plain(v) for k, v in value.keywords.items()}}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return getattr(value, "__name__", repr(value))


def table():
    """{architecture: {"module", "class", "args"}} of every entry point in `MODULES`."""
    recorded = {}

    def record(cls, variant, pretrained, **kwargs):
        for builder_only in ("pretrained_filter_fn", "pretrained_strict", "feature_cfg"):
            kwargs.pop(builder_only, None)
        recorded[variant] = {"class": cls.__name__, "args": plain(kwargs)}
        raise _Recorded

    for module in MODULES.values():
        module.build_model_with_cfg = record
    for name in timm.list_models():
        module = _registry._model_to_module.get(name)
        if module not in MODULES:
            continue
        try:
            _registry.model_entrypoint(name)(pretrained=False)
        except _Recorded:
            recorded[name]["module"] = module
    return recorded


def save_models(names):
    """Each of `names` (keys of `ARCHITECTURES`) made and saved in turn after the images: a model
    depends on the random state the one before it left, so remake them in the order they were made."""
    torch.manual_seed(0)
    images = torch.rand(2, 3, 32, 32) * 2 - 1
    for name in names:
        architecture, extra = ARCHITECTURES[name]
        model = timm.create_model(architecture, pretrained=False, **{**SMALL, **extra}).eval()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(MOVED.get(name, 0.3) * torch.randn_like(parameter))
            logits = model(images).numpy()
        _hub.save_for_hf(model, os.path.join(MODELS, name), safe_serialization=True)
        np.savez_compressed(os.path.join(MODELS, f"{name}.npz"),
                            images=images.permute(0, 2, 3, 1).numpy(), logits=logits)


def main(names):
    """Makes the models `names` alone, or, given none, every model and then the table."""
    save_models(names or ARCHITECTURES)  # before table(), which replaces the builder
    if names:
        return
    architectures = table()
    deprecated = {old: new for old, new in _registry._deprecated_models.items()
                  if new and new.split(".")[0] in architectures}
    with open(TABLE, "w") as f:
        json.dump({"timm": timm.__version__, "architectures": architectures, "deprecated": deprecated},
                  f, sort_keys=True,
                  separators=(",", ":"))
        f.write("\n")
    print(f"{len(architectures)} architectures; models: {sorted(ARCHITECTURES)}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
