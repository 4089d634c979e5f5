"""The released checkpoints that keras_vit reads, as data.

One row per released file, from their sources:

- The paper's 2020 files (Dosovitskiy et al., ICLR 2021): the
  ``gs://vit_models/imagenet21k`` and ``imagenet21k+imagenet2012`` buckets of
  google-research/vision_transformer (README "Available models"; the ``-224``
  fine-tunes with the README's expected top-1).
- AugReg (Steiner et al., "How to train your ViT?", TMLR 2022): the
  vision_transformer README's table of recommended checkpoints (pre-trained
  on ImageNet-21k; fine-tuned at 384 px, with its ImageNet top-1), and the
  224 px and ImageNet-1k-only files that timm's ``vision_transformer.py``
  ``default_cfgs`` load, with timm's measured top-1
  (``results/results-imagenet.csv``) where we have it.
- big_vision (Beyer et al., "Better plain ViT baselines for ImageNet-1k",
  arXiv:2205.01580): ``gs://big_vision/vit_s16_i1k_{90,150,300}ep.npz``.
- Hugging Face ``google/vit-*``: conversions of the 2020 files.
- timm's ViT tags on the Hugging Face Hub (``timm/<architecture>.<tag>``).

Accuracies are the sources' reported ImageNet-1k top-1 (%) at the entry's
resolution; None where the source reports none.
"""

import dataclasses
import difflib
import functools
import importlib.resources

from keras_vit.presets import preset_config
from keras_vit.presets import preset_name

_GCS = "https://storage.googleapis.com/"
_AUGREG = _GCS + "vit_models/augreg/"
_PAPER = "Dosovitskiy et al., ICLR 2021 (google-research/vision_transformer)"
_AUGREG_REF = "Steiner et al., How to train your ViT? (vision_transformer README)"
_TIMM_REF = "timm results-imagenet.csv"


@dataclasses.dataclass(frozen=True)
class PretrainedWeights:
    """One released checkpoint.

    Attributes:
        name: ``"<preset>.<tag>"``, e.g. ``"vit_b16.augreg_in21k_ft_in1k_384"``.
        architecture: the keras_vit preset it is an instance of.
        format: ``"npz"`` (vit_jax / AugReg / big_vision), ``"huggingface"``
            or ``"timm"``: the reader it needs.
        url: where it is downloaded from (``https://`` or ``hf://``).
        image_size: the resolution it was trained or fine-tuned at.
        num_classes: classes of its head: 1000 (ImageNet-1k), 21843
            (ImageNet-21k) or 0 (no head).
        top1: the source's reported ImageNet-1k top-1 (%), or None.
        pretraining: the data it was trained on.
        class_names: ``"imagenet1k"`` when the head is ImageNet-1k's, in the
            standard order (:func:`imagenet1k_class_names`); else None.
        reference: where the entry and its number come from.
        sha256: the file's published SHA-256, checked after download.
        size: the file's published size in bytes, checked likewise.
    """

    name: str
    architecture: str
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


_IN21K = "ImageNet-21k"
_FT = "ImageNet-21k, fine-tuned on ImageNet-1k"
_IN1K = "ImageNet-1k"


def _entry(architecture, tag, format, url, image_size, num_classes, top1, pretraining, reference):
    return PretrainedWeights(
        name=f"{architecture}.{tag}", architecture=architecture, format=format, url=url,
        image_size=image_size, num_classes=num_classes, top1=top1, pretraining=pretraining,
        class_names="imagenet1k" if num_classes == 1000 else None, reference=reference)


def _rows():
    # The paper's 2020 files: (preset, file name, top-1 of the 384 px fine-tune).
    for arch, file, top1 in [
        ("vit_b16", "ViT-B_16", 84.21), ("vit_b32", "ViT-B_32", None),
        ("vit_l16", "ViT-L_16", None), ("vit_l32", "ViT-L_32", None),
        ("r50_vit_b16", "R50+ViT-B_16", 84.99),
    ]:
        yield _entry(arch, "orig_in21k", "npz", f"{_GCS}vit_models/imagenet21k/{file}.npz",
                     224, 21843, None, _IN21K, _PAPER)
        yield _entry(arch, "orig_in21k_ft_in1k_384", "npz",
                     f"{_GCS}vit_models/imagenet21k+imagenet2012/{file}.npz", 384, 1000, top1, _FT,
                     _PAPER + (f"; top-1: {_TIMM_REF}" if top1 else ""))
    yield _entry("vit_h14", "orig_in21k", "npz", f"{_GCS}vit_models/imagenet21k/ViT-H_14.npz",
                 224, 21843, None, _IN21K, _PAPER)
    for arch, file, top1 in [("vit_b16", "ViT-B_16-224", 81.2), ("vit_l16", "ViT-L_16-224", 82.7)]:
        yield _entry(arch, "orig_in21k_ft_in1k_224", "npz",
                     f"{_GCS}vit_models/imagenet21k+imagenet2012/{file}.npz", 224, 1000, top1, _FT,
                     _PAPER + " (README: expected top-1)")

    # AugReg, the README's recommended checkpoints: (preset, pre-training run,
    # fine-tuning learning rate, top-1 at 384 px).
    for arch, run, lr, top1 in [
        ("vit_l16", "L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "0.01", 85.59),
        ("vit_b16", "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.03", 85.49),
        ("vit_s16", "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03", 83.73),
        ("r50_vit_l32", "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01", 85.99),
        ("r26_vit_s32", "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01", 83.85),
        ("vit_ti16", "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03", 78.22),
        ("vit_b32", "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.01", 83.59),
        ("vit_s32", "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "0.01", 79.58),
        ("r_vit_ti16", "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03", 75.40),
    ]:
        yield _entry(arch, "augreg_in21k", "npz", f"{_AUGREG}{run}.npz", 224, 21843, None,
                     _IN21K, _AUGREG_REF)
        yield _entry(arch, "augreg_in21k_ft_in1k_384", "npz",
                     f"{_AUGREG}{run}--imagenet2012-steps_20k-lr_{lr}-res_384.npz", 384, 1000, top1,
                     _FT, _AUGREG_REF)

    # AugReg 224 px fine-tunes and ImageNet-1k-only runs, as timm loads them.
    for arch, tag, file, size, top1 in [
        ("vit_ti16", "augreg_in21k_ft_in1k_224",
         "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224", 224, 75.45),
        ("vit_s32", "augreg_in21k_ft_in1k_224",
         "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224", 224, None),
        ("vit_s16", "augreg_in21k_ft_in1k_224",
         "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224", 224, 81.40),
        ("vit_b32", "augreg_in21k_ft_in1k_224",
         "B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224", 224, None),
        ("vit_b16", "augreg_in21k_ft_in1k_224",
         "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224", 224, 84.53),
        ("vit_b8", "augreg_in21k_ft_in1k_224",
         "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224", 224, None),
        ("vit_l16", "augreg_in21k_ft_in1k_224",
         "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224", 224, 85.86),
        ("vit_b8", "augreg_in21k", "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", 224, None),
        ("vit_s16", "augreg_in1k_224",
         "S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224", 224, 78.84),
        ("vit_s16", "augreg_in1k_384",
         "S_16-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_384", 384, 81.13),
        ("vit_b32", "augreg_in1k_224",
         "B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224", 224, 74.91),
        ("vit_b32", "augreg_in1k_384",
         "B_32-i1k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_384", 384, 78.75),
        ("vit_b16", "augreg_in1k_224",
         "B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224", 224, 79.15),
        ("vit_b16", "augreg_in1k_384",
         "B_16-i1k-300ep-lr_0.001-aug_strong2-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_384", 384, 81.10),
    ]:
        classes = 21843 if tag == "augreg_in21k" else 1000
        data = _IN21K if classes == 21843 else _IN1K if "in1k_" in tag and "in21k" not in tag else _FT
        yield _entry(arch, tag, "npz", f"{_AUGREG}{file}.npz", size, classes, top1, data,
                     "Steiner et al. (files as in timm's default_cfgs)" + (f"; top-1: {_TIMM_REF}" if top1 else ""))

    # big_vision's plain ViT-S/16 on ImageNet-1k (GAP, 2-D sin-cos position
    # embeddings, MLP head).
    for epochs, top1 in [(90, 76.5), (150, 78.5), (300, 80.0)]:
        yield _entry("vit_s16", f"bv_in1k_{epochs}ep", "npz",
                     f"{_GCS}big_vision/vit_s16_i1k_{epochs}ep.npz", 224, 1000, top1, _IN1K,
                     "Beyer et al., Better plain ViT baselines for ImageNet-1k (big_vision)")

    # Hugging Face conversions of the 2020 files.
    for arch, repo, size, classes, top1 in [
        ("vit_b16", "vit-base-patch16-224", 224, 1000, 81.2),
        ("vit_b16", "vit-base-patch16-384", 384, 1000, 84.21),
        ("vit_b32", "vit-base-patch32-384", 384, 1000, None),
        ("vit_l16", "vit-large-patch16-224", 224, 1000, 82.7),
        ("vit_l16", "vit-large-patch16-384", 384, 1000, None),
        ("vit_l32", "vit-large-patch32-384", 384, 1000, None),
        ("vit_b16", "vit-base-patch16-224-in21k", 224, 0, None),
        ("vit_b32", "vit-base-patch32-224-in21k", 224, 0, None),
        ("vit_l16", "vit-large-patch16-224-in21k", 224, 0, None),
        ("vit_l32", "vit-large-patch32-224-in21k", 224, 0, None),
        ("vit_h14", "vit-huge-patch14-224-in21k", 224, 0, None),
    ]:
        tag = "hf_in21k" if classes == 0 else f"hf_in21k_ft_in1k_{size}"
        yield _entry(arch, tag, "huggingface", f"hf://google/{repo}", size, classes, top1,
                     _IN21K if classes == 0 else _FT,
                     "Hugging Face google/vit-* (converted from the 2020 files)")

    # timm's ViT tags on the Hub: (preset, timm architecture, tag, top-1).
    for arch, timm_arch, tag, top1 in [
        ("vit_b16", "vit_base_patch16_224", "augreg2_in21k_ft_in1k", 85.11),
        ("vit_b8", "vit_base_patch8_224", "augreg2_in21k_ft_in1k", None),
        ("vit_ti16", "vit_tiny_patch16_224", "augreg_in21k_ft_in1k", 75.45),
        ("vit_ti16", "vit_tiny_patch16_384", "augreg_in21k_ft_in1k", 78.44),
        ("vit_s16", "vit_small_patch16_224", "augreg_in21k_ft_in1k", 81.40),
        ("vit_s16", "vit_small_patch16_384", "augreg_in21k_ft_in1k", 83.81),
        ("vit_b16", "vit_base_patch16_224", "augreg_in21k_ft_in1k", 84.53),
        ("vit_b16", "vit_base_patch16_384", "augreg_in21k_ft_in1k", 86.01),
        ("vit_l16", "vit_large_patch16_224", "augreg_in21k_ft_in1k", 85.86),
        ("vit_l16", "vit_large_patch16_384", "augreg_in21k_ft_in1k", 87.10),
        ("vit_b16", "vit_base_patch16_224", "orig_in21k_ft_in1k", 81.78),
        ("vit_b16", "vit_base_patch16_384", "orig_in21k_ft_in1k", 84.21),
        ("vit_s16", "vit_small_patch16_224", "augreg_in1k", 78.84),
        ("vit_s16", "vit_small_patch16_384", "augreg_in1k", 81.13),
        ("vit_b32", "vit_base_patch32_224", "augreg_in1k", 74.91),
        ("vit_b32", "vit_base_patch32_384", "augreg_in1k", 78.75),
        ("vit_b16", "vit_base_patch16_224", "augreg_in1k", 79.15),
        ("vit_b16", "vit_base_patch16_384", "augreg_in1k", 81.10),
        ("vit_b16", "vit_base_patch16_224", "augreg_in21k", None),
        ("vit_b16", "vit_base_patch16_224", "orig_in21k", None),
    ]:
        size = int(timm_arch.rsplit("_", 1)[1])
        classes = 21843 if tag == "augreg_in21k" else 0 if tag == "orig_in21k" else 1000
        data = _IN21K if classes != 1000 else _IN1K if tag == "augreg_in1k" else _FT
        yield _entry(arch, f"timm_{tag}_{size}", "timm", f"hf://timm/{timm_arch}.{tag}", size, classes,
                     top1, data, "timm (Hugging Face Hub)" + (f"; top-1: {_TIMM_REF}" if top1 else ""))


PRETRAINED = {entry.name: entry for entry in _rows()}


def pretrained(architecture=None):
    """The released checkpoints that load by name.

    Args:
        architecture: only those of this preset (``"vit_b16"`` or the paper's
            ``"ViT-B/16"``); None for all.

    Returns:
        A list of :class:`PretrainedWeights`, in the order of their sources.

    Raises:
        ValueError: an unknown preset.
    """
    if architecture is None:
        return list(PRETRAINED.values())
    name = preset_name(architecture)
    return [entry for entry in PRETRAINED.values() if entry.architecture == name]


def get_pretrained(name):
    """The :class:`PretrainedWeights` called `name`.

    Raises:
        ValueError: no such name; the message lists the closest ones.
    """
    if name in PRETRAINED:
        return PRETRAINED[name]
    close = difflib.get_close_matches(str(name), PRETRAINED, n=5, cutoff=0.5)
    hint = f" Closest: {', '.join(close)}." if close else ""
    raise ValueError(
        f"{name!r} is not a released checkpoint.{hint} List them with "
        "`keras_vit.pretrained()` or `keras-vit pretrained`.")


def default_pretrained(architecture):
    """The recommended checkpoint of a preset: the best reported top-1 among
    ImageNet-21k pre-trainings fine-tuned at 224 px; else the best reported
    top-1 at any resolution; else the first ImageNet-1k classifier; else the
    first released.

    Raises:
        ValueError: an unknown preset, or one with no released weights.
    """
    entries = pretrained(architecture)
    if not entries:
        raise ValueError(
            f"No released weights for {architecture!r}. Presets with weights: "
            f"{', '.join(sorted({e.architecture for e in PRETRAINED.values()}))}.")
    scored = [e for e in entries if e.top1 is not None]
    transfer = [e for e in scored if e.pretraining == _FT and e.image_size == 224]
    if transfer or scored:
        return max(transfer or scored, key=lambda e: e.top1)
    return next((e for e in entries if e.num_classes == 1000), entries[0])


@functools.cache
def _labels():
    text = importlib.resources.files("keras_vit.weights").joinpath("imagenet1k_labels.txt").read_text()
    return tuple(text.splitlines())


def imagenet1k_class_names():
    """The 1000 ImageNet-1k class names in the standard (WordNet id) order,
    as Hugging Face's ``google/vit-*`` ``id2label`` spells them, e.g. index
    0 ``"tench, Tinca tinca"``, 281 ``"tabby, tabby cat"``."""
    return list(_labels())
