"""Makes tests/data/tome/: three small random timm ViTs and the logits of
ToMe's own code (`tome.patch.timm`) at several r, for tests/test_token_merging.py.

Made with timm 1.0.31 and ToMe at facebookresearch/ToMe HEAD (2023), torch
2.13.0 CPU, as ../shared/tools/timm_reference/README.md says:

    PYTHONPATH="$TIMM_DIR:$TOME_DIR:$PWD/../shared/tools/timm_reference" \\
        .venv/bin/python tests/data/make_tome_fixtures.py

Each model is a timm hub folder (``config.json``, ``model.safetensors``) of
28x28 images in 4x4 patches (49 patches), 3 blocks, width 32, 4 heads, 5
classes, its weights moved away from their initial values. ``tome.npz``
holds the images ``(4, 28, 28, 3)`` (channels last, the models' input as
they are) and, per model and r, ``{model}/r{r}``: ToMe's logits with
proportional attention; for ``vit``, ``vit/r8/source``: ToMe's source
tracking, ``(4, tokens, 50)``.
"""

import json
import os

import numpy as np
import torch

import torchvision_standin  # noqa: F401
import timm
import tome
from safetensors.torch import save_file

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tome")
SMALL = dict(img_size=28, patch_size=4, depth=3, embed_dim=32, num_heads=4, num_classes=5)
MODELS = {  # name: (architecture, its arguments)
    "vit": ("vit_tiny_patch16_224", {}),                        # a [class] token
    "deit": ("deit_tiny_distilled_patch16_224", {}),            # [class] and distillation tokens
    "gap": ("vit_tiny_patch16_224", dict(class_token=False, global_pool="avg")),  # neither
}
SCHEDULES = {"4": 4, "8": 8, "16": 16, "list": [12, 0, 6]}


def main():
    os.makedirs(HERE, exist_ok=True)
    torch.manual_seed(0)
    images = torch.rand(4, 3, 28, 28) * 2 - 1
    outputs = {"images": images.permute(0, 2, 3, 1).numpy()}
    for name, (architecture, extra) in MODELS.items():
        args = {**SMALL, **extra}
        model = timm.create_model(architecture, pretrained=False, **args).eval()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(0.3 * torch.randn_like(parameter))
        folder = os.path.join(HERE, name)
        os.makedirs(folder, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  os.path.join(folder, "model.safetensors"))
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"architecture": architecture, "num_classes": 5, "model_args": args}, f,
                      indent=1)
        with torch.no_grad():
            outputs[f"{name}/r0"] = model(images).numpy()
            tome.patch.timm(model, trace_source=name == "vit")
            for label, r in SCHEDULES.items():
                model.r = r
                outputs[f"{name}/r{label}"] = model(images).numpy()
                if name == "vit" and label == "8":
                    outputs["vit/r8/source"] = model._tome_info["source"].numpy()
    np.savez_compressed(os.path.join(HERE, "tome.npz"), **outputs)
    print({k: v.shape for k, v in outputs.items()})


if __name__ == "__main__":
    main()
