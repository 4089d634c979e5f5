"""One way to load a model from anything a user names: `load_model`; and
for a model built elsewhere from the file's arguments, the file read once
(`read_pretrained`) and its weights loaded into that model (`load_pretrained`).

The command line (``keras-vit predict MODEL``, ``convert``, ``segment
--init``, ``zero-shot``) loads through `load_model`, and training's ``--init``
through `read_pretrained`, so a name that one of them takes, the others take,
with the same resizing, the same new head and the same errors. A checkpoint is read by
`keras_vit.ViT.from_checkpoint` (`keras_vit.ImageTextModel.from_checkpoint`
for both towers), which sit below this module: the model classes do not
import it.
"""

import dataclasses
import pathlib

import keras

from keras_vit.config import FIELDS
from keras_vit.config import pair
from keras_vit.io import files


def load_model(source, image_size=None, num_classes=None, resample_method=None,
               model_class=None, flag="", **overrides):
    """The model that `source` names, with its weights.

    Args:
        source: a keras_vit model already loaded (returned changed as
            asked), or a str or path, one of
            - a ``.keras`` file: any keras_vit model saved by Keras
              (`ViT`, `ImageTextModel`, ``MaskedPatchPredictor``, a
              segmentation probe);
            - a checkpoint file or folder, by path, URL or ``hf://``: a
              vit_jax / big_vision ``.npz``, a Hugging Face folder, a timm
              ``.safetensors`` file or hub folder (docs/checkpoints.md);
            - a released name (``"vit_b16.augreg_in21k_ft_in1k_224"``,
              `keras_vit.pretrained`), downloaded once into the cache;
            - a preset (``"vit_b16"``, ``"ViT-B/16"``): its recommended
              released checkpoint (`keras_vit.released.default_pretrained`).
        image_size: int or (int, int), or None for the source's own. Another
            size resamples the learned position embeddings (Sec. 3.2).
        num_classes: int or None. A number of classes other than the
            source's gives a new zero-initialised head (DeiT's distillation
            head goes with it; 0: no head); None or the same keeps the head.
        resample_method: ``"bilinear"`` (vit_jax), ``"bicubic"`` (timm),
            ``"dinov2"``, or None for the source's own (bilinear for a
            ``.keras`` model).
        model_class: `keras_vit.ViT` (the default for a checkpoint: its
            image tower, for a two-tower folder) or
            `keras_vit.ImageTextModel` (both towers and the tokenizer); a
            ``.keras`` file holding another class is refused, naming it.
            None takes what a ``.keras`` file holds.
        flag: the command-line flag that named `source` (``"--init"``), for
            the error messages.
        **overrides: other `ViT` arguments: ``dtype`` (a policy name such
            as ``"mixed_bfloat16"``; None: the source's own), ``dropout_rate``, ``class_names``,
            ``representation_size=None`` (drops the pre-logits layer, as
            vit_jax fine-tunes), ...

    Returns:
        The model; a ``.keras`` source that needs no change is returned as
        loaded.

    Raises:
        FileNotFoundError: a `.keras` path where there is no file.
        ValueError: a source that is not what `model_class` asks, or a
            change that its model cannot take; a
            `keras_vit.weights.CheckpointError` (a ValueError) for a
            checkpoint that cannot be read. The message names the source,
            what it holds and the fix.
    """
    from keras_vit.image_text import ImageTextModel
    from keras_vit.model import ViT

    if overrides.get("dtype") is None:  # the source's own
        overrides.pop("dtype", None)
    if str(source).endswith(".keras") and not pathlib.Path(source).expanduser().exists():
        raise FileNotFoundError(f"{flag} {source}: no such file." if flag else f"No model at {source}.")
    if isinstance(source, keras.Model) or str(source).endswith(".keras"):
        model = source if isinstance(source, keras.Model) else files.load_keras_model(source, flag)
        if model_class is not None and not isinstance(model, model_class):
            raise ValueError(f"{_named(source, flag)} holds {_a(type(model).__name__)}, not "
                             f"{_a(model_class.__name__)}.")
        if isinstance(model, ViT):
            changed = _changed(model, image_size, num_classes, resample_method, overrides)
            if not isinstance(source, keras.Model):  # the base an adapter file names
                changed.weights_source = str(source)
            return changed
        changes = {**overrides, "image_size": image_size, "num_classes": num_classes}
        asked = sorted(k for k, v in changes.items() if v is not None)
        if asked:
            raise ValueError(f"{_named(source, flag)} holds {_a(type(model).__name__)}, not a ViT: "
                             f"{', '.join(asked)} cannot be changed here.")
        return model
    source = _recommended_checkpoint(source)
    if model_class is ImageTextModel:
        if num_classes is not None:
            raise ValueError("An ImageTextModel has no classification head: drop `num_classes` "
                             "(zero-shot classes come from keras_vit.zero_shot_classifier).")
        return ImageTextModel.from_checkpoint(source, image_size, resample_method, **overrides)
    return (model_class or ViT).from_checkpoint(source, image_size, num_classes, resample_method,
                                                **overrides)


def _named(source, flag):
    if isinstance(source, keras.Model):
        return f"The model {source.name}"
    return f"{flag} {source}" if flag else str(source)


def _a(name):
    return f"{'an' if name[0] in 'AEIOU' else 'a'} {name}"


def _recommended_checkpoint(source):
    """A preset's name (``"vit_b16"``) as its recommended released
    checkpoint's; anything else as it is."""
    from keras_vit.presets import preset_name
    from keras_vit.released import PRETRAINED
    from keras_vit.released import default_pretrained

    name = str(source)
    if name in PRETRAINED or pathlib.Path(name).expanduser().exists() or "/" in name:
        return source
    try:
        return default_pretrained(preset_name(name)).name
    except ValueError:  # not a preset: the checkpoint reader names what it is not
        return source


def _changed(model, image_size, num_classes, resample_method, overrides):
    """`model` (a ViT) with what the caller asks changed, its weights copied;
    `model` itself when nothing changes."""
    config = model.get_config()
    changes = {key: value for key, value in overrides.items()
               if key not in config or (model.dtype_policy.name if key == "dtype" else config[key]) != value}
    skip = []
    if image_size is not None and pair(image_size, "image_size") != tuple(model.image_size):
        changes["image_size"] = image_size
    if num_classes is not None and num_classes != model.num_classes:
        changes.update(num_classes=num_classes, class_names=overrides.get("class_names"))
        skip += ["head", "head_dist"]  # a new, zero-initialised head
    if "representation_size" in changes:
        skip.append("pre_logits")
    if not changes:
        return model
    return model.with_config(skip=tuple(skip), method=resample_method or "bilinear", **changes)


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """A file's model, read once: its ViT arguments and its weights.

    Attributes:
        fields: dict of `keras_vit.ViTConfig` fields (the file's architecture).
        weights: the model a ``.keras`` file holds (a `ViT`, or a
            ``MaskedPatchPredictor``: a ViT backbone), or the
            `keras_vit.weights.Checkpoint` a checkpoint reader gave.
    """

    fields: dict
    weights: object


def read_pretrained(source, flag=""):
    """The `Pretrained` of `source`: a ``.keras`` file holding a keras_vit
    model with a ViT backbone, or anything `load_model` reads as a
    checkpoint (a file or folder by path, URL or ``hf://``, a released
    name, a preset's recommended checkpoint). The file is read once; no
    model is built from its arguments here.

    Raises:
        FileNotFoundError: a ``.keras`` path where there is no file.
        ValueError: a ``.keras`` file holding another model, or a
            `keras_vit.weights.CheckpointError` for a checkpoint that cannot
            be read; the message names `flag` and the source.
    """
    from keras_vit.config import ViTConfig
    from keras_vit.released import locate
    from keras_vit.weights import read_checkpoint

    if not str(source).endswith(".keras"):
        path, _ = locate(_recommended_checkpoint(source))
        checkpoint = read_checkpoint(path)
        return Pretrained(dict(checkpoint.config), checkpoint)
    model = files.load_keras_model(source, flag)
    if not isinstance(getattr(model, "config", None), ViTConfig):
        raise ValueError(f"{_named(source, flag)}: {_a(type(model).__name__)}, not a keras_vit ViT or "
                         "MaskedPatchPredictor; fine-tuning starts from one of those.")
    return Pretrained({k: v for k, v in model.get_config().items() if k in FIELDS}, model)


def load_pretrained(model, pretrained):
    """Loads `pretrained`'s weights into `model`, a ViT built from its
    fields with some changed: the position embeddings resampled to its grid
    (bilinear; a checkpoint's own method for it), a new zero-initialised head
    where its classes differ (DeiT's distillation head with it), and no
    pre-logits layer where it has none (as vit_jax fine-tunes)."""
    from keras_vit.weights import build_model
    from keras_vit.weights import transfer_weights

    source = pretrained.weights
    if isinstance(source, keras.Model):
        skip = ("pre_logits", "patch_corruption", "mpp_head")  # what a fine-tuned ViT leaves behind
        if pretrained.fields.get("num_classes", 0) != model.num_classes:
            skip += ("head", "head_dist")
        transfer_weights(source, model, skip=skip)
        return model
    # build_model's handling of the state (head, pre-logits, position grid), into `model`
    return build_model(lambda **fields: model, source, tuple(model.image_size), model.num_classes,
                       representation_size=model.representation_size)
