"""Makes tests/data/deit_distillation_loss.npz: DeiT's own `DistillationLoss`
(facebookresearch/deit ``losses.py``, commit 7e160fe) on fixed logits, the
reference `keras_vit.distillation.deit_loss` is held to.

Made with torch 2.13.0 CPU, DeiT's ``losses.py`` on the path:

    PYTHONPATH="$DEIT_DIR" .venv/bin/python tests/data/make_deit_distillation_loss.py

The base criterion is DeiT's ``main.py``'s: ``torch.nn.CrossEntropyLoss()``
for integer labels, and timm's ``SoftTargetCrossEntropy`` (written out below,
as timm 1.0.31's ``timm/loss/cross_entropy.py`` has it) for the soft targets
of MixUp/CutMix. The teacher is a module that returns fixed logits, since
`DistillationLoss` calls it on the inputs under ``no_grad``.

The file holds ``class_logits``, ``distillation_logits`` and
``teacher_logits`` (8, 10) float32, ``labels`` (8,) int64, ``soft_labels``
(8, 10) float32, ``alpha``, ``tau``, and ``{kind}_{labels}`` (a loss per
(alpha, tau) pair) for kind ``hard``/``soft`` and labels ``int``/``soft``.
"""

import pathlib

import numpy as np
import torch
from losses import DistillationLoss

PAIRS = ((0.5, 1.0), (0.1, 3.0), (0.9, 0.5))  # DeiT's defaults, a hot teacher, a cold one


def soft_target_cross_entropy(x, target):
    """timm's ``SoftTargetCrossEntropy.forward``."""
    return torch.sum(-target * torch.nn.functional.log_softmax(x, dim=-1), dim=-1).mean()


class FixedTeacher(torch.nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, inputs):
        return self.logits


def main():
    rng = np.random.default_rng(0)
    batch, classes = 8, 10
    arrays = {name: (scale * rng.normal(size=(batch, classes))).astype("float32")
              for name, scale in (("class_logits", 2.0), ("distillation_logits", 2.0), ("teacher_logits", 3.0))}
    arrays["labels"] = rng.integers(0, classes, size=batch).astype("int64")
    mixed = rng.dirichlet(np.full(classes, 0.3), size=batch)
    arrays["soft_labels"] = (0.5 * np.eye(classes)[arrays["labels"]] + 0.5 * mixed).astype("float32")
    arrays["alpha"] = np.array([a for a, _ in PAIRS], "float64")
    arrays["tau"] = np.array([t for _, t in PAIRS], "float64")
    outputs = (torch.from_numpy(arrays["class_logits"]), torch.from_numpy(arrays["distillation_logits"]))
    teacher = FixedTeacher(torch.from_numpy(arrays["teacher_logits"]))
    for labels, base, target in (("int", torch.nn.CrossEntropyLoss(), arrays["labels"]),
                                 ("soft", soft_target_cross_entropy, arrays["soft_labels"])):
        for kind in ("hard", "soft"):
            arrays[f"{kind}_{labels}"] = np.array([
                float(DistillationLoss(base, teacher, kind, alpha, tau)(None, outputs, torch.from_numpy(target)))
                for alpha, tau in PAIRS], "float64")
    path = pathlib.Path(__file__).with_name("deit_distillation_loss.npz")
    np.savez(path, **arrays)
    print(path, {k: v for k, v in arrays.items() if k.startswith(("hard", "soft"))})


if __name__ == "__main__":
    main()
