"""The released checkpoints that keras_vit reads, as data.

One row per released file, in compact tables (configs as data, as big_vision's
``VANITY_NAMES`` and timm's ``default_cfgs`` do). Each table names the file it
was read from:

- The paper's 2020 files (Dosovitskiy et al., ICLR 2021), buckets
  ``gs://vit_models/imagenet21k`` and ``gs://vit_models/imagenet21k+imagenet2012``:
  google-research/vision_transformer ``vit_jax.ipynb`` at cd49f296 (its
  ``gsutil ls`` of both buckets), ``README.md`` at 10ffdebb ("Available ViT
  models"; the 2020-10-29 note: the fine-tunes are at 384 px except the
  ``-224`` files, "expected to achieve 81.2% and 82.7% top-1") and
  ``vit_jax/configs/models.py`` at 2ecbc732 (file names = model names; the
  R50 hybrids' ResNet depths).
- AugReg (Steiner et al., "How to train your ViT?", TMLR 2022): the same
  ``README.md``'s table of recommended checkpoints (upstream file, 384 px
  ImageNet fine-tune, ImageNet accuracy); big_vision ``big_vision/models/vit.py``
  at 33256536 (``VANITY_NAMES`` ``howto-i21k-*``) agrees on the upstream files.
  The 224 px fine-tunes, the B/8 files and the ImageNet-1k-only runs are the
  ``https://storage.googleapis.com/vit_models/augreg/...`` URLs of timm's
  ``default_cfgs`` (huggingface/pytorch-image-models
  ``timm/models/vision_transformer.py`` at 2cff2350).
- big_vision (Beyer et al., "Better plain ViT baselines for ImageNet-1k",
  arXiv:2205.01580): google-research/big_vision ``big_vision/models/vit.py``
  (``i1k-s16-{90,150,300}ep``), ``big_vision/configs/vit_s16_i1k.py`` at
  642c086e (GAP, ``sincos2d``, ``rep_size=True``, 224 px; "reach 76.5%" at
  90 epochs) and ``README.md`` at 0127fb6b (76.5%).
- Hugging Face ``google/vit-*``: conversions of the 2020 files (model cards:
  ImageNet-21k at 224 px, fine-tuned on ImageNet at 224 or 384 px; the
  ``-in21k`` models keep the pooler but no classifier). Repo ids only: the
  Hub is not reachable from where this table was written.
- timm's ViT tags on the Hub (``hf://timm/<timm architecture>.<tag>``, each with
  ``config.json`` and ``model.safetensors``): timm's ``default_cfgs`` at
  2cff2350, the paper's plain class-token ViTs (timm's ResNet hybrids are not
  read); top-1 and resolution from ``results/results-imagenet.csv`` at 4e5207c7.
- The ViT family (DeiT, DINOv2 and v3, CLIP, SigLIP and SigLIP 2, AIMv2, EVA-02,
  the Perception Encoder, C-RADIO) on the Hugging Face Hub and timm's: each
  table names its sources beside it.

Accuracies are the reported ImageNet-1k validation top-1 (%) at the entry's
resolution, with the source in ``reference``; None where no source reports
one. The sources publish no SHA-256 or exact byte size for these files, so
``sha256`` and ``size`` are None (the Hub checks its own files).
"""

import dataclasses
import difflib
import functools
import importlib.resources
import os
import pathlib
import warnings

from keras_vit.deprecation import renamed_keyword
from keras_vit.io.download import fetch
from keras_vit.io.download import is_url
from keras_vit.io.files import CheckpointError
from keras_vit.presets import preset_name

_GCS = "https://storage.googleapis.com/"

_IN21K = "ImageNet-21k"
_FT = "ImageNet-21k, fine-tuned on ImageNet-1k"
_IN1K = "ImageNet-1k"

_PAPER = "Dosovitskiy et al., ICLR 2021 (google-research/vision_transformer)"
_README = "vision_transformer README"
_AUGREG = "Steiner et al., How to train your ViT?, TMLR 2022"
_BV = "Beyer et al., Better plain ViT baselines for ImageNet-1k, arXiv:2205.01580 (big_vision)"
_TIMM_CSV = "timm results-imagenet.csv"


@dataclasses.dataclass(frozen=True)
class PretrainedWeights:
    """One released checkpoint.

    Attributes:
        name: ``"<preset>.<tag>"``, e.g. ``"vit_b16.augreg_in21k_ft_in1k_384"``.
        preset: the keras_vit preset it is an instance of (`architecture`: its old,
            deprecated name).
        format: ``"npz"`` (vit_jax / AugReg / big_vision), ``"huggingface"``
            or ``"timm"``: the reader it needs.
        url: where it is downloaded from: ``https://storage.googleapis.com/...``
            for Google's buckets (see :attr:`gcs`), ``hf://owner/repo`` for
            the Hugging Face Hub.
        image_size: the resolution it was trained or fine-tuned at.
        num_classes: classes of its head: 1000 (ImageNet-1k), 21843
            (ImageNet-21k) or 0 (released without a head).
        top1: the reported ImageNet-1k top-1 (%) at `image_size`, or None;
            `metric` says of what.
        pretraining: the data it was trained on.
        class_names: ``"imagenet1k"`` when the head is ImageNet-1k's, in the
            standard order (:func:`imagenet1k_class_names`); else None.
        reference: where the entry and its number come from.
        sha256: the file's published SHA-256, checked after download.
        size: the file's published size in bytes, checked likewise.
        metric: what `top1` measures: ``"top-1"`` (the checkpoint's own
            head), ``"linear-probe top-1"`` (a linear classifier on its
            features: DINOv2), ``"linear-probe top-1 (ImageNet-ReaL)"``
            (the same, scored with ImageNet's ReaL labels: DINOv3) or
            ``"zero-shot top-1"`` (class names through the text tower: CLIP,
            SigLIP) or ``"attentive-probe top-1"`` (an attention-pooling
            classifier on its frozen features: AIMv2) or ``"fine-tuned top-1"``
            (the features fine-tuned end to end: EVA-02's masked-image pre-training).
    """

    name: str
    preset: str
    format: str
    url: str
    image_size: int
    num_classes: int
    top1: float | None
    pretraining: str
    class_names: str | None
    reference: str
    sha256: str | None = None
    size: int | None = None
    metric: str = "top-1"

    @property
    def architecture(self):
        """Deprecated: `preset`."""
        warnings.warn("PretrainedWeights.architecture is deprecated; use PretrainedWeights.preset (the "
                      "keras_vit preset the checkpoint is an instance of).", DeprecationWarning, stacklevel=2)
        return self.preset

    @property
    def gcs(self):
        """The ``gs://`` form of a Google Cloud Storage URL, else None."""
        return "gs://" + self.url.removeprefix(_GCS) if self.url.startswith(_GCS) else None


def _entry(preset, tag, format, url, image_size, num_classes, top1, pretraining, reference, metric="top-1"):
    return PretrainedWeights(
        name=f"{preset}.{tag}", preset=preset, format=format, url=url,
        image_size=image_size, num_classes=num_classes, top1=top1, pretraining=pretraining,
        class_names="imagenet1k" if num_classes == 1000 else None, reference=reference, metric=metric)


def _cites(reference, top1, source):
    return f"{reference}; top-1: {source}" if top1 is not None else reference


# -- The paper's 2020 files ---------------------------------------------------
# gs://vit_models/imagenet21k/<name>.npz: pre-trained at 224 px, with the
# 21843-class head (timm: "classifier not valid"; the Hugging Face conversions
# drop it). The bucket's ViT-B_8 and hybrids are of 2021; R26+ViT-B_32 has no
# preset.
_ORIG_IN21K = [
    ("vit_b16", "ViT-B_16"), ("vit_b32", "ViT-B_32"), ("vit_l16", "ViT-L_16"),
    ("vit_l32", "ViT-L_32"), ("vit_h14", "ViT-H_14"), ("vit_b8", "ViT-B_8"),
    ("r50_vit_b16", "R50+ViT-B_16"), ("r50_vit_l32", "R50+ViT-L_32"),
]
# gs://vit_models/imagenet21k+imagenet2012/<name>.npz: (preset, name, size,
# top-1, its source). The README gives no number for the 384 px files; where
# timm converted the same file (jx_vit_*), its measured top-1 is given.
# ViT-B_8.npz of this bucket is left out: no source states its resolution.
_ORIG_FT = [
    ("vit_b16", "ViT-B_16", 384, 84.212, f"{_TIMM_CSV} (vit_base_patch16_384.orig_in21k_ft_in1k)"),
    ("vit_b32", "ViT-B_32", 384, None, None),
    ("vit_l16", "ViT-L_16", 384, None, None),
    ("vit_l32", "ViT-L_32", 384, 81.508, f"{_TIMM_CSV} (vit_large_patch32_384.orig_in21k_ft_in1k)"),
    ("r50_vit_b16", "R50+ViT-B_16", 384, 84.988, f"{_TIMM_CSV} (vit_base_r50_s16_384.orig_in21k_ft_in1k)"),
    ("vit_b16", "ViT-B_16-224", 224, 81.2, f"{_README}, 2020-10-29 (expected)"),
    ("vit_l16", "ViT-L_16-224", 224, 82.7, f"{_README}, 2020-10-29 (expected)"),
]

# -- AugReg ---------------------------------------------------------------------
# The README's recommended checkpoints: (preset, upstream run, fine-tuning
# learning rate, "Imagenet accuracy" of the 384 px fine-tune). The fine-tune is
# "<run>--imagenet2012-steps_20k-lr_<lr>-res_384.npz".
_AUGREG_RECOMMENDED = [
    ("vit_l16", "L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "0.01", 85.59),
    ("vit_b16", "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.03", 85.49),
    ("vit_s16", "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03", 83.73),
    ("r50_vit_l32", "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01", 85.99),
    ("r26_vit_s32", "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01", 83.85),
    ("vit_ti16", "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03", 78.22),
    ("vit_b32", "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01", 83.59),
    ("vit_s32", "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "0.01", 79.58),
    ("r_vit_ti16", "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03", 75.40),
]
# More AugReg files, as timm's default_cfgs load them: (preset, tag, file
# without ".npz", size, top-1 of timm's conversion of that file). The 224 px
# fine-tunes of S/32, B/32 and L/16 start from other upstream runs than the
# README's recommended ones (their names say which).
_AUGREG_TIMM = [
    ("vit_ti16", "augreg_in21k_ft_in1k_224", "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.03-res_224", 224, 75.452),
    ("vit_s32", "augreg_in21k_ft_in1k_224", "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.03-res_224", 224, 76.010),
    ("vit_s16", "augreg_in21k_ft_in1k_224", "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.03-res_224", 224, 81.402),
    ("vit_b32", "augreg_in21k_ft_in1k_224", "B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.03-res_224", 224, 80.732),
    ("vit_b16", "augreg_in21k_ft_in1k_224", "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.01-res_224", 224, 84.534),
    ("vit_b8", "augreg_in21k_ft_in1k_224", "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.01-res_224", 224, 85.838),
    ("vit_l16", "augreg_in21k_ft_in1k_224", "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
     "--imagenet2012-steps_20k-lr_0.01-res_224", 224, 85.856),
    ("vit_b8", "augreg_in21k", "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", 224, None),
    ("vit_s16", "augreg_in1k_224", "S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.01-res_224", 224, 78.842),
    ("vit_s16", "augreg_in1k_384", "S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"
     "--imagenet2012-steps_20k-lr_0.01-res_384", 384, 81.130),
    ("vit_b32", "augreg_in1k_224", "B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1"
     "--imagenet2012-steps_20k-lr_0.01-res_224", 224, 74.908),
    ("vit_b32", "augreg_in1k_384", "B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1"
     "--imagenet2012-steps_20k-lr_0.01-res_384", 384, 78.750),
    ("vit_b16", "augreg_in1k_224", "B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1"
     "--imagenet2012-steps_20k-lr_0.01-res_224", 224, 79.154),
    ("vit_b16", "augreg_in1k_384", "B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1"
     "--imagenet2012-steps_20k-lr_0.01-res_384", 384, 81.102),
]

# -- big_vision -----------------------------------------------------------------
# ViT-S/16 trained on ImageNet-1k at 224 px (GAP, 2-D sin-cos position
# embeddings, tanh pre-logits): (epochs, top-1, its source).
_BIG_VISION = [
    (90, 76.5, "big_vision README and configs/vit_s16_i1k.py"),
    (150, 78.5, "arXiv:2205.01580"),
    (300, 80.0, "arXiv:2205.01580 (abstract: 80% in 300 epochs)"),
]

# -- Hugging Face google/vit-* ----------------------------------------------------
# (preset, repo, size, classes, top-1 of the 2020 file it converts, source).
_HUGGINGFACE = [
    ("vit_b16", "vit-base-patch16-224", 224, 1000, 81.2, f"{_README}, 2020-10-29 (ViT-B_16-224, expected)"),
    ("vit_b16", "vit-base-patch16-384", 384, 1000, 84.212, f"{_TIMM_CSV} (vit_base_patch16_384.orig_in21k_ft_in1k)"),
    ("vit_b32", "vit-base-patch32-384", 384, 1000, None, None),
    ("vit_l16", "vit-large-patch16-224", 224, 1000, 82.7, f"{_README}, 2020-10-29 (ViT-L_16-224, expected)"),
    ("vit_l16", "vit-large-patch16-384", 384, 1000, None, None),
    ("vit_l32", "vit-large-patch32-384", 384, 1000, 81.508, f"{_TIMM_CSV} (vit_large_patch32_384.orig_in21k_ft_in1k)"),
    ("vit_b16", "vit-base-patch16-224-in21k", 224, 0, None, None),
    ("vit_b32", "vit-base-patch32-224-in21k", 224, 0, None, None),
    ("vit_l16", "vit-large-patch16-224-in21k", 224, 0, None, None),
    ("vit_l32", "vit-large-patch32-224-in21k", 224, 0, None, None),
    ("vit_h14", "vit-huge-patch14-224-in21k", 224, 0, None, None),
]

# -- timm -------------------------------------------------------------------------
# (timm architecture, tag, top-1 from results-imagenet.csv). The preset and
# resolution follow from the timm architecture's name.
_TIMM = [
    ("vit_base_patch16_224", "augreg2_in21k_ft_in1k", 85.108),
    ("vit_base_patch8_224", "augreg2_in21k_ft_in1k", 86.252),
    ("vit_tiny_patch16_224", "augreg_in21k_ft_in1k", 75.452),
    ("vit_tiny_patch16_384", "augreg_in21k_ft_in1k", 78.438),
    ("vit_small_patch32_224", "augreg_in21k_ft_in1k", 76.010),
    ("vit_small_patch32_384", "augreg_in21k_ft_in1k", 80.476),
    ("vit_small_patch16_224", "augreg_in21k_ft_in1k", 81.402),
    ("vit_small_patch16_384", "augreg_in21k_ft_in1k", 83.814),
    ("vit_base_patch32_224", "augreg_in21k_ft_in1k", 80.732),
    ("vit_base_patch32_384", "augreg_in21k_ft_in1k", 83.358),
    ("vit_base_patch16_224", "augreg_in21k_ft_in1k", 84.534),
    ("vit_base_patch16_384", "augreg_in21k_ft_in1k", 86.010),
    ("vit_base_patch8_224", "augreg_in21k_ft_in1k", 85.838),
    ("vit_large_patch16_224", "augreg_in21k_ft_in1k", 85.856),
    ("vit_large_patch16_384", "augreg_in21k_ft_in1k", 87.096),
    ("vit_base_patch16_224", "orig_in21k_ft_in1k", 81.782),
    ("vit_base_patch16_384", "orig_in21k_ft_in1k", 84.212),
    ("vit_large_patch32_384", "orig_in21k_ft_in1k", 81.508),
    ("vit_small_patch16_224", "augreg_in1k", 78.842),
    ("vit_small_patch16_384", "augreg_in1k", 81.130),
    ("vit_base_patch32_224", "augreg_in1k", 74.908),
    ("vit_base_patch32_384", "augreg_in1k", 78.750),
    ("vit_base_patch16_224", "augreg_in1k", 79.154),
    ("vit_base_patch16_384", "augreg_in1k", 81.102),
    ("vit_base_patch32_224", "orig_in21k", None),
    ("vit_base_patch16_224", "orig_in21k", None),
    ("vit_large_patch32_224", "orig_in21k", None),
    ("vit_large_patch16_224", "orig_in21k", None),
    ("vit_huge_patch14_224", "orig_in21k", None),
    ("vit_tiny_patch16_224", "augreg_in21k", None),
    ("vit_small_patch32_224", "augreg_in21k", None),
    ("vit_small_patch16_224", "augreg_in21k", None),
    ("vit_base_patch32_224", "augreg_in21k", None),
    ("vit_base_patch16_224", "augreg_in21k", None),
    ("vit_base_patch8_224", "augreg_in21k", None),
    ("vit_large_patch16_224", "augreg_in21k", None),
]
_TIMM_SIZES = {"tiny": "ti", "small": "s", "base": "b", "large": "l", "huge": "h"}

# -- The ViT family ---------------------------------------------------------------------
# Each release as the Hugging Face Hub and timm's Hub have it: (preset, tag,
# Hugging Face repo, timm name, size, classes, number, metric, its source).
_DEIT_README = "facebookresearch/deit README_deit.md at 94aecfa1 (DeiT paper, Table 5)"
_DINOV2_README = ("facebookresearch/dinov2 README.md at b8931f7b, 'ImageNet linear' "
                  "(evaluated at 224 px)")
_DINOV3_CARD = ("facebookresearch/dinov3 MODEL_CARD.md at 6876159a (the Hugging Face model card), "
                "'Results', IN-ReaL (a linear probe on ImageNet with the ReaL labels)")
_CLIP_PAPER = "Radford et al., arXiv:2103.00020, Table 11 (as open_clip's README quotes it)"
_OPEN_CLIP = "open_clip's evaluation of these weights (docs/openclip_results.csv at 29b90b8d)"
_FAMILY = [
    ("deit_ti16_distilled", "fb_in1k_224", "facebook/deit-tiny-distilled-patch16-224",
     "deit_tiny_distilled_patch16_224.fb_in1k", 224, 1000, 74.5, "top-1", _DEIT_README),
    ("deit_s16_distilled", "fb_in1k_224", "facebook/deit-small-distilled-patch16-224",
     "deit_small_distilled_patch16_224.fb_in1k", 224, 1000, 81.2, "top-1", _DEIT_README),
    ("deit_b16_distilled", "fb_in1k_224", "facebook/deit-base-distilled-patch16-224",
     "deit_base_distilled_patch16_224.fb_in1k", 224, 1000, 83.4, "top-1", _DEIT_README),
    ("deit_b16_distilled", "fb_in1k_384", "facebook/deit-base-distilled-patch16-384",
     "deit_base_distilled_patch16_384.fb_in1k", 384, 1000, 85.2, "top-1",
     _DEIT_README + ", 1000 epochs"),
    *[(f"dinov2_{size}14{reg}", "lvd142m_518",
       f"facebook/dinov2-{'with-registers-' if reg else ''}{name}",
       f"vit_{name}_patch14_{'reg4_' if reg else ''}dinov2.lvd142m", 518, 0, top1,
       "linear-probe top-1", _DINOV2_README)
      for size, name, top1, top1_reg in (("s", "small", 81.1, 80.9), ("b", "base", 84.5, 84.6),
                                          ("l", "large", 86.3, 86.7), ("g", "giant", 86.5, 87.1))
      for reg, top1 in (("", top1), ("_reg4", top1_reg))],
    ("clip_b32", "openai_224", "openai/clip-vit-base-patch32", "vit_base_patch32_clip_224.openai",
     224, 512, 63.2, "zero-shot top-1", _CLIP_PAPER),
    ("clip_b16", "openai_224", "openai/clip-vit-base-patch16", "vit_base_patch16_clip_224.openai",
     224, 512, 68.6, "zero-shot top-1", _CLIP_PAPER),
    ("clip_l14", "openai_224", "openai/clip-vit-large-patch14", "vit_large_patch14_clip_224.openai",
     224, 768, 75.3, "zero-shot top-1", _CLIP_PAPER),
    ("clip_l14_336", "openai_336", "openai/clip-vit-large-patch14-336",
     "vit_large_patch14_clip_336.openai", 336, 768, 76.2, "zero-shot top-1",
     "Radford et al., arXiv:2103.00020, Tables 11 and 16 (ViT-L/14@336px)"),
    # SigLIP: Google's READMEs and colab give no ImageNet number for these; open_clip measured them.
    *[(preset, f"webli_{release}", f"google/siglip-{name}-patch{patch}-{release}",
       f"vit_{name}_patch{patch}_siglip_{release}.webli", release - release % patch, 0, top1,
       "zero-shot top-1", _OPEN_CLIP)
      # the size is what the patch convolution sees: So400m/14's 384 px release, 378
      for preset, name, patch, release, top1 in (
          ("siglip_b16", "base", 16, 224, 76.04), ("siglip_b16", "base", 16, 256, 76.53),
          ("siglip_b16", "base", 16, 384, 78.49), ("siglip_b16", "base", 16, 512, 79.14),
          ("siglip_l16", "large", 16, 256, 80.45), ("siglip_l16", "large", 16, 384, 82.07),
          ("siglip_so400m14", "so400m", 14, 224, 82.03),
          ("siglip_so400m14", "so400m", 14, 384, 83.08))],
]
# AIMv2 on timm's Hub (Apple's own Hugging Face folders need their remote code; timm's
# files are read): (preset, timm size, {release size: IN-1k top-1 with a frozen trunk}).
_AIMV2_README = "apple/ml-aim README.md at bd9e068, 'AIMv2 Model Gallery' (IN-1k, frozen trunk)"
_AIMV2 = [("aimv2_l14", "large", {224: 86.6, 336: 87.6, 448: 87.9}),
          ("aimv2_h14", "huge", {224: 87.5, 336: 88.2, 448: 88.6}),
          ("aimv2_1b14", "1b", {224: 88.1, 336: 88.7, 448: 89.0}),
          ("aimv2_3b14", "3b", {224: 88.5, 336: 89.2, 448: 89.5})]
# The Perception Encoder's core and spatial towers on timm's Hub (Meta's own files are not
# read): (preset, timm architecture, size, classes). Their model cards' numbers were not at hand where this
# table was written, so no ImageNet number is given.
_PE_CORE = [("pe_core_t16", "vit_pe_core_tiny_patch16_384", 384, 512),  # and the CLIP embedding's width
            ("pe_core_s16", "vit_pe_core_small_patch16_384", 384, 512),
            ("pe_core_b16", "vit_pe_core_base_patch16_224", 224, 1024),
            ("pe_core_l14", "vit_pe_core_large_patch14_336", 336, 1024),
            ("pe_core_g14", "vit_pe_core_gigantic_patch14_448", 448, 1280),
            ("pe_spatial_t16", "vit_pe_spatial_tiny_patch16_512", 512, 0),  # headless
            ("pe_spatial_s16", "vit_pe_spatial_small_patch16_512", 512, 0),
            ("pe_spatial_b16", "vit_pe_spatial_base_patch16_512", 512, 0),
            ("pe_spatial_l14", "vit_pe_spatial_large_patch14_448", 448, 0),
            ("pe_spatial_g14", "vit_pe_spatial_gigantic_patch14_448", 448, 0)]
# EVA-02's masked-image pre-training on timm's Hub (headless): (preset, timm architecture, tags).
# No ImageNet number is given: the paper's are of its fine-tuned files, and its tables were not at
# hand where this one was written.
_EVA02 = [("eva02_t14", "eva02_tiny_patch14_224", ("mim_in22k",)),
          ("eva02_s14", "eva02_small_patch14_224", ("mim_in22k",)),
          ("eva02_b14", "eva02_base_patch14_224", ("mim_in22k",)),
          ("eva02_l14", "eva02_large_patch14_224", ("mim_in22k", "mim_m38m"))]
# C-RADIO's backbones on timm's Hub, remapped by timm from NVIDIA's own files (which are not
# read): (preset, timm architecture). Headless; no ImageNet number is given: the RADIO papers'
# tables were not at hand where this one was written.
_RADIO = [("radio_v3_b16", "vit_base_patch16_radio_v3", "C-RADIOv3-B"),
          ("radio_v3_l16", "vit_large_patch16_radio_v3", "C-RADIOv3-L"),
          ("radio_v3_h16", "vit_huge_patch16_radio_v3", "C-RADIOv3-H"),
          ("radio_v3_g16", "vit_giant_patch16_radio_v3", "C-RADIOv3-g"),
          ("radio_v4_so400m16", "vit_so400m_patch16_radio_v4", "C-RADIOv4-SO400M"),
          ("radio_v4_h16", "vit_huge_patch16_radio_v4", "C-RADIOv4-H")]
# EVA-02's CLIP image towers on timm's Hub: (preset, timm architecture, the CLIP embedding's width).
# Their zero-shot numbers were not at hand where this table was written, so none is given.
_EVA02_CLIP = [("eva02_clip_b16", "eva02_base_patch16_clip_224", 512),
               ("eva02_clip_l14", "eva02_large_patch14_clip_224", 768),
               ("eva02_clip_l14_336", "eva02_large_patch14_clip_336", 768)]
_FAMILY_DATA = {"eva02": "ImageNet-21k or Merged-38M images (masked image modeling of EVA-CLIP's features)",
                "eva02_clip": "Merged-2B image-text pairs (LAION-2B and COYO-700M; EVA-CLIP's contrastive training)",
                "radio": "images, distilled from several vision teachers (C-RADIO's agglomerative training)",
                "pe_core": "MetaCLIP image-text pairs, then synthetic video captions (PE's data engine)",
                "deit": "ImageNet-1k", "dinov2": "LVD-142M", "dinov3": "LVD-1689M",
                "aimv2": "image-caption pairs (AIMv2's multimodal autoregressive pre-training)",
                "clip": "WIT-400M (OpenAI)", "siglip": "WebLI", "siglip2": "WebLI"}
# SigLIP 2's NaFlex towers on the Hugging Face Hub (Siglip2Model folders, read with their
# Gemma tokenizer; timm's naflexvit files are not read): (preset, repo). Their model cards
# and the SigLIP 2 paper (Tschannen et al., arXiv:2502.14786) were not at hand where this
# table was written, so no ImageNet number is given.
_SIGLIP2 = [("siglip2_b16", "siglip2-base-patch16-naflex"),
            ("siglip2_so400m16", "siglip2-so400m-patch16-naflex")]
# DINOv3 on the Hugging Face Hub (gated: accept the license there, then log in;
# timm's DINOv3 files are not read): (preset, repo, IN-ReaL).
_DINOV3 = [("dinov3_s16", "dinov3-vits16", 87.0), ("dinov3_s16plus", "dinov3-vits16plus", 88.0),
           ("dinov3_b16", "dinov3-vitb16", 89.3), ("dinov3_l16", "dinov3-vitl16", 90.2),
           ("dinov3_h16plus", "dinov3-vith16plus", 90.3), ("dinov3_7b16", "dinov3-vit7b16", 90.4)]


def _timm_preset(timm_architecture):
    """``"vit_base_patch16_384"`` -> ``("vit_b16", 384)``."""
    _, size, patch, resolution = timm_architecture.split("_")
    return f"vit_{_TIMM_SIZES[size]}{patch.removeprefix('patch')}", int(resolution)


def _google_rows():
    """Google's files: the paper's 2020 ``.npz`` files, AugReg's, big_vision's, and their
    Hugging Face conversions (``google/vit-*``)."""
    for preset, file in _ORIG_IN21K:
        yield _entry(preset, "orig_in21k", "npz", f"{_GCS}vit_models/imagenet21k/{file}.npz", 224, 21843,
                     None, _IN21K, _PAPER)
    for preset, file, size, top1, source in _ORIG_FT:
        yield _entry(preset, f"orig_in21k_ft_in1k_{size}", "npz",
                     f"{_GCS}vit_models/imagenet21k+imagenet2012/{file}.npz", size, 1000, top1, _FT,
                     _cites(_PAPER, top1, source))
    for preset, run, lr, top1 in _AUGREG_RECOMMENDED:
        url = f"{_GCS}vit_models/augreg/{run}"
        yield _entry(preset, "augreg_in21k", "npz", f"{url}.npz", 224, 21843, None, _IN21K,
                     f"{_AUGREG} ({_README}, recommended)")
        yield _entry(preset, "augreg_in21k_ft_in1k_384", "npz",
                     f"{url}--imagenet2012-steps_20k-lr_{lr}-res_384.npz", 384, 1000, top1, _FT,
                     f"{_AUGREG} ({_README}, recommended); top-1: {_README}")
    for preset, tag, file, size, top1 in _AUGREG_TIMM:
        classes = 21843 if tag == "augreg_in21k" else 1000
        data = _IN21K if classes != 1000 else _IN1K if tag.startswith("augreg_in1k") else _FT
        yield _entry(preset, tag, "npz", f"{_GCS}vit_models/augreg/{file}.npz", size, classes, top1, data,
                     _cites(f"{_AUGREG} (file as in timm's default_cfgs)", top1, _TIMM_CSV))
    for epochs, top1, source in _BIG_VISION:
        yield _entry("vit_s16", f"bv_in1k_{epochs}ep", "npz", f"{_GCS}big_vision/vit_s16_i1k_{epochs}ep.npz",
                     224, 1000, top1, _IN1K, f"{_BV}; top-1: {source}")
    for preset, repo, size, classes, top1, source in _HUGGINGFACE:
        tag = "hf_in21k" if classes == 0 else f"hf_in21k_ft_in1k_{size}"
        yield _entry(preset, tag, "huggingface", f"hf://google/{repo}", size, classes, top1,
                     _IN21K if classes == 0 else _FT,
                     _cites("Hugging Face google/vit-* (conversion of the 2020 files)", top1, source))


def _family_rows():
    """The ViT family on the Hugging Face Hub and timm's: DeiT, DINOv2, CLIP and SigLIP on
    both, DINOv3 and SigLIP 2's NaFlex towers on Hugging Face's, AIMv2 on timm's."""
    for preset, tag, repo, timm_name, size, classes, top1, metric, source in _FAMILY:
        for prefix, format, url in (("hf", "huggingface", f"hf://{repo}"), ("timm", "timm", f"hf://timm/{timm_name}")):
            yield _entry(preset, f"{prefix}_{tag}", format, url, size, classes, top1,
                         _FAMILY_DATA[preset.split("_")[0]],
                         f"{repo} (Hugging Face), {timm_name} (timm); top-1: {source}", metric)
    for preset, repo, top1 in _DINOV3:
        yield _entry(preset, "hf_lvd1689m", "huggingface", f"hf://facebook/{repo}-pretrain-lvd1689m", 224, 0, top1,
                     _FAMILY_DATA["dinov3"], f"facebook/{repo}-pretrain-lvd1689m (Hugging Face); top-1: {_DINOV3_CARD}",
                     "linear-probe top-1 (ImageNet-ReaL)")
    # SigLIP 2's NaFlex releases: 256 patches per image, a 16 x 16 position table (256 px
    # square), no head (the features are the embedding)
    for preset, repo in _SIGLIP2:
        yield _entry(preset, "hf_webli_naflex", "huggingface", f"hf://google/{repo}", 256, 0, None,
                     _FAMILY_DATA["siglip2"], f"google/{repo} (Hugging Face)", "zero-shot top-1")
    for preset, size, releases in _AIMV2:
        for resolution, top1 in releases.items():
            timm_name = f"aimv2_{size}_patch14_{resolution}.apple_pt"
            yield _entry(preset, f"timm_apple_pt_{resolution}", "timm", f"hf://timm/{timm_name}", resolution, 0,
                         top1, _FAMILY_DATA["aimv2"], f"{timm_name} (timm); top-1: {_AIMV2_README}",
                         "attentive-probe top-1")


def _timm_rows():
    """The files on timm's Hub alone: EVA-02 and its CLIP towers, the Perception Encoder,
    C-RADIO, and timm's own tags of the paper's ViTs."""
    for preset, timm_name, tags in _EVA02:
        for tag in tags:
            yield _entry(preset, f"timm_{tag}", "timm", f"hf://timm/{timm_name}.{tag}", 224, 0, None,
                         _FAMILY_DATA["eva02"], f"{timm_name}.{tag} (timm), from Yuxin-CV/EVA-02", "fine-tuned top-1")
    for preset, timm_name, classes in _EVA02_CLIP:
        resolution = int(timm_name.rsplit("_", 1)[1])
        yield _entry(preset, "timm_merged2b", "timm", f"hf://timm/{timm_name}.merged2b", resolution, classes, None,
                     _FAMILY_DATA["eva02_clip"], f"{timm_name}.merged2b (timm), from QuanSun/EVA-CLIP",
                     "zero-shot top-1")
    for preset, timm_name, resolution, classes in _PE_CORE:
        yield _entry(preset, "timm_fb", "timm", f"hf://timm/{timm_name}.fb", resolution, classes, None,
                     _FAMILY_DATA["pe_core"],
                     f"{timm_name}.fb (timm), from facebook/PE-" + ("Core" if classes else "Spatial"),
                     "zero-shot top-1" if classes else "linear-probe top-1")
    for preset, timm_name, repo in _RADIO:
        yield _entry(preset, "timm_c_radio", "timm", f"hf://timm/{timm_name}.c_radio", 512, 0, None,
                     _FAMILY_DATA["radio"], f"{timm_name}.c_radio (timm), from nvidia/{repo}", "linear-probe top-1")
    for timm_architecture, tag, top1 in _TIMM:
        preset, size = _timm_preset(timm_architecture)
        classes = 21843 if tag == "augreg_in21k" else 0 if tag == "orig_in21k" else 1000
        data = _IN21K if classes != 1000 else _IN1K if tag == "augreg_in1k" else _FT
        yield _entry(preset, f"timm_{tag}_{size}", "timm", f"hf://timm/{timm_architecture}.{tag}", size, classes,
                     top1, data, _cites(f"timm default_cfgs ({timm_architecture}.{tag})", top1, _TIMM_CSV))


def _rows():
    """Every released checkpoint, in the order of their sources."""
    for rows in (_google_rows(), _family_rows(), _timm_rows()):
        yield from rows


PRETRAINED = {entry.name: entry for entry in _rows()}


def pretrained(preset=None, *, architecture=None):
    """The released checkpoints that load by name.

    Args:
        preset: only those of this preset, by our name (``"vit_b16"``)
            or the paper's (``"ViT-B/16"``); None for all.
        architecture: deprecated: `preset`.

    Returns:
        A list of :class:`PretrainedWeights`, in the order of their sources:
        the 2020 files, AugReg, big_vision, Hugging Face, timm.

    Raises:
        ValueError: an unknown preset (the message lists the known ones).
    """
    preset = renamed_keyword("pretrained", "preset", "architecture", preset, architecture)
    if preset is None:
        return list(PRETRAINED.values())
    name = preset_name(preset)
    return [entry for entry in PRETRAINED.values() if entry.preset == name]


def get_pretrained(name):
    """The released checkpoint called `name`.

    Args:
        name: ``"<preset>.<tag>"``, e.g. ``"vit_b16.augreg_in21k_ft_in1k_224"``.

    Returns:
        Its :class:`PretrainedWeights`.

    Raises:
        ValueError: no such name; the message names the closest ones and how
            to list them all.
    """
    if name in PRETRAINED:
        return PRETRAINED[name]
    close = difflib.get_close_matches(str(name), PRETRAINED, n=5, cutoff=0.5)
    hint = f" Closest: {', '.join(close)}." if close else ""
    raise ValueError(
        f"{name!r} is not a released checkpoint.{hint} List them with "
        "`keras_vit.pretrained()` or `keras-vit pretrained`.")


def default_pretrained(preset=None, *, architecture=None):
    """The recommended checkpoint of a preset.

    The best reported ImageNet-1k fine-tune at 224 px of an ImageNet-21k
    pre-training among Google's own ``.npz`` files (AugReg where there is
    one, else the 2020 file); else their best ImageNet-1k classifier at
    another resolution; else the first released file (an ImageNet-21k
    pre-training, to fine-tune). Google's files come first because they need
    no optional dependency to download.

    Args:
        preset: a preset, by our name or the paper's.
        architecture: deprecated: `preset`.

    Returns:
        A :class:`PretrainedWeights`.

    Raises:
        ValueError: an unknown preset, or one with no released weights.
    """
    preset = renamed_keyword("default_pretrained", "preset", "architecture", preset, architecture)
    if preset is None:
        raise TypeError("default_pretrained() needs a preset, e.g. default_pretrained('vit_b16').")
    entries = pretrained(preset)
    if not entries:
        raise ValueError(
            f"No released weights for {preset!r}. Presets with weights: "
            f"{', '.join(sorted({e.preset for e in PRETRAINED.values()}))}.")

    def rank(entry):
        return (entry.num_classes == 1000, entry.format == "npz", entry.pretraining == _FT,
                entry.image_size == 224, entry.top1 or 0.0)

    return max(entries, key=rank)  # the first of equals


@functools.cache
def _labels():
    text = importlib.resources.files("keras_vit").joinpath("imagenet1k_labels.txt").read_text("utf-8")
    return tuple(text.splitlines())


def imagenet1k_class_names():
    """The 1000 ImageNet-1k (ILSVRC-2012) class names in the standard order.

    The order is that of the sorted WordNet ids, which every ImageNet-1k head
    here uses. The names are the WordNet synonyms of TensorFlow Datasets'
    ``IMAGENET_LABELS_LIST`` (``tensorflow_datasets/datasets/siscore/labels.py``),
    e.g. index 0 ``"tench, Tinca tinca"``, 281 ``"tabby, tabby cat"``; unlike
    lists that repeat ``"crane"``, they tell 134 ``"crane (bird)"`` from 517
    ``"crane (machine)"``, so all 1000 are distinct.

    Returns:
        A new list of 1000 str.
    """
    return list(_labels())


def locate(location):
    """The local path of a checkpoint given as a path, a URL or a released name.

    Args:
        location: a local file or folder; a URL (``hf://``, ``https://``,
            ``gs://``, ... see :func:`keras_vit.io.download.fetch`); or
            the name of a released checkpoint (:func:`keras_vit.pretrained`).

    Returns:
        ``(path, entry)``: the local ``pathlib.Path`` (downloaded and cached
        if need be) and the :class:`PretrainedWeights`
        entry for a released name, else None.

    Raises:
        CheckpointError: no such file, URL or name (the closest names are
            suggested), or the download failed.
    """
    location = str(location)
    if not is_url(location):  # a local file or folder, else a released name
        path = pathlib.Path(location).expanduser()
        if path.exists():
            return path, None
        if "/" in location or os.sep in location or path.suffix in (".npz", ".safetensors", ".keras"):
            raise CheckpointError(f"No checkpoint file or folder at {location}.")
        try:
            entry = get_pretrained(location)
        except ValueError as error:
            raise CheckpointError(f"No checkpoint file or folder at {location}. {error}") from None
        return fetch(entry.url, sha256=entry.sha256, size=entry.size), entry
    return fetch(location), None
