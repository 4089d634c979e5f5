"""Zero-shot classification (CLIP, Radford et al. 2021, Sec. 3.1.4): each
class is the average of its prompts' normalised text embeddings, and the
result is an ordinary `keras_vit.ViT` whose head holds them.

    w_c = normalize(mean_t normalize(text_tower(template_t.format(c))))
    logits = exp(logit_scale) · normalize(image_tower(x)) W (+ logit_bias)

so ``predict``, ``evaluate``, ``quantize``, ``export`` and ``keras-vit
predict`` work on it as on any ViT.
"""

import keras
import numpy as np

from keras_vit.config import is_int
from keras_vit.image_text import ImageTextModel
from keras_vit.model import ViT
from keras_vit.weights import assign_weights

# The 80 prompts of CLIP's ImageNet evaluation (OpenAI's "Prompt Engineering
# for ImageNet" notebook; open_clip's OPENAI_IMAGENET_TEMPLATES), in their order.
IMAGENET_TEMPLATES = (
    "a bad photo of a {}.", "a photo of many {}.", "a sculpture of a {}.",
    "a photo of the hard to see {}.", "a low resolution photo of the {}.", "a rendering of a {}.",
    "graffiti of a {}.", "a bad photo of the {}.", "a cropped photo of the {}.",
    "a tattoo of a {}.", "the embroidered {}.", "a photo of a hard to see {}.",
    "a bright photo of a {}.", "a photo of a clean {}.", "a photo of a dirty {}.",
    "a dark photo of the {}.", "a drawing of a {}.", "a photo of my {}.", "the plastic {}.",
    "a photo of the cool {}.", "a close-up photo of a {}.", "a black and white photo of the {}.",
    "a painting of the {}.", "a painting of a {}.", "a pixelated photo of the {}.",
    "a sculpture of the {}.", "a bright photo of the {}.", "a cropped photo of a {}.",
    "a plastic {}.", "a photo of the dirty {}.", "a jpeg corrupted photo of a {}.",
    "a blurry photo of the {}.", "a photo of the {}.", "a good photo of the {}.",
    "a rendering of the {}.", "a {} in a video game.", "a photo of one {}.", "a doodle of a {}.",
    "a close-up photo of the {}.", "a photo of a {}.", "the origami {}.",
    "the {} in a video game.", "a sketch of a {}.", "a doodle of the {}.", "a origami {}.",
    "a low resolution photo of a {}.", "the toy {}.", "a rendition of the {}.",
    "a photo of the clean {}.", "a photo of a large {}.", "a rendition of a {}.",
    "a photo of a nice {}.", "a photo of a weird {}.", "a blurry photo of a {}.",
    "a cartoon {}.", "art of a {}.", "a sketch of the {}.", "a embroidered {}.",
    "a pixelated photo of a {}.", "itap of the {}.", "a jpeg corrupted photo of the {}.",
    "a good photo of a {}.", "a plushie {}.", "a photo of the nice {}.",
    "a photo of the small {}.", "a photo of the weird {}.", "the cartoon {}.",
    "art of the {}.", "a drawing of the {}.", "a photo of the large {}.",
    "a black and white photo of a {}.", "the plushie {}.", "a dark photo of a {}.",
    "itap of a {}.", "graffiti of the {}.", "a toy {}.", "itap of my {}.",
    "a photo of a cool {}.", "a photo of a small {}.", "a tattoo of the {}.",
)
# The short set open_clip ships (SIMPLE_IMAGENET_TEMPLATES), from the same notebook.
SIMPLE_TEMPLATES = (
    "itap of a {}.", "a bad photo of the {}.", "a origami {}.", "a photo of the large {}.",
    "a {} in a video game.", "art of the {}.", "a photo of the small {}.",
)
TEMPLATES = {"imagenet": IMAGENET_TEMPLATES, "simple": SIMPLE_TEMPLATES}


def prompt_templates(templates):
    """`templates` as a tuple of format strings: ``"imagenet"`` (the CLIP
    paper's 80), ``"simple"`` (open_clip's 7), or a non-empty list of
    strings with one ``{}`` each, where the class name goes; anything else
    raises an error saying what to pass."""
    if isinstance(templates, str):
        if templates not in TEMPLATES:
            raise ValueError(f"Unknown templates {templates!r}: use {sorted(TEMPLATES)} or a list "
                             "of format strings such as ['a photo of a {}.'].")
        return TEMPLATES[templates]
    if not isinstance(templates, (list, tuple)):
        raise TypeError(f"templates must be 'imagenet', 'simple' or a list of format strings such "
                        f"as ['a photo of a {{}}.'], got {type(templates).__name__} {templates!r:.80}.")
    if not templates:
        raise ValueError("templates is empty: give at least one format string such as "
                         "'a photo of a {}.', or 'imagenet' or 'simple'.")
    bad = [t for t in templates if not isinstance(t, str) or t.count("{}") != 1]
    if bad:
        raise ValueError(f"Each template must be a string with one '{{}}' for the class name, "
                         f"such as 'a photo of a {{}}.'; got {bad[:3]}.")
    return tuple(templates)


def check_class_names(class_names):
    """`class_names` as a list of distinct, non-empty strings, in the
    classes' order; anything else raises a `TypeError` or `ValueError`
    naming the problem and what to pass."""
    if isinstance(class_names, str):
        raise TypeError(f"class_names must be a list of names such as [{class_names!r}], got the "
                        f"string {class_names!r:.80}, which would make one class of each of its "
                        "characters.")
    if not isinstance(class_names, (list, tuple)):
        raise TypeError(f"class_names must be a list of names, in the classes' order, such as "
                        f"['cat', 'dog'], got {type(class_names).__name__} {class_names!r:.80}.")
    if not class_names:
        raise ValueError("class_names is empty: give at least one class name.")
    first = {}
    for i, name in enumerate(class_names):
        if not isinstance(name, str):
            raise TypeError(f"class_names[{i}] is {type(name).__name__} {name!r:.80}, not a string: "
                            "the names go into the prompts. Give each class's name as a string.")
        if not name.strip():
            raise ValueError(f"class_names[{i}] is {name!r}, an empty name: the prompts would not "
                             "say which class they are about. Give each class a name.")
        if name in first:
            raise ValueError(f"class_names has {name!r} twice (at {first[name]} and {i}): the two "
                             "classes would get one set of weights. Give each class once, by a "
                             "name of its own.")
        first[name] = i
    return list(class_names)


def class_embeddings(model, class_names, templates="imagenet", batch_size=256):
    """The classes' zero-shot weights: each class's prompts embedded by the
    text tower (``predict`` in batches of `batch_size`: the 80 ImageNet
    prompts of 1000 classes are 80,000 texts), normalised, averaged, and
    normalised again (open_clip's ``build_zero_shot_classifier``). The
    arguments are checked first: `model` an `ImageTextModel`,
    `class_names` (`check_class_names`), `templates` (`prompt_templates`),
    `batch_size` a positive int.

    Returns: float32 ``(E, classes)``.
    """
    if not isinstance(model, ImageTextModel):
        raise TypeError(f"Zero-shot classification takes a keras_vit.ImageTextModel (CLIP, SigLIP), "
                        f"got {type(model).__name__}. Read one with "
                        "ImageTextModel.from_checkpoint(folder).")
    class_names = check_class_names(class_names)
    templates = prompt_templates(templates)
    if not is_int(batch_size, 1):
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}.")
    prompts = [template.format(name) for name in class_names for template in templates]
    embeds = keras.ops.convert_to_numpy(model.text_model.predict(
        model.tokenize(prompts), batch_size=batch_size, verbose=0)).astype(np.float64)
    embeds /= np.linalg.norm(embeds, axis=-1, keepdims=True)
    mean = embeds.reshape(len(class_names), len(templates), -1).mean(axis=1)
    return (mean / np.linalg.norm(mean, axis=-1, keepdims=True)).T.astype(np.float32)


def zero_shot_classifier(model, class_names, templates="imagenet", name=None):
    """A `keras_vit.ViT` classifying into `class_names` with no training.

    Args:
        model: a `keras_vit.ImageTextModel` (CLIP, SigLIP).
        class_names: the classes' names, a list of distinct strings put
            into the prompts (`check_class_names`).
        templates: ``"imagenet"`` (the 80 prompts of the CLIP paper),
            ``"simple"`` (open_clip's 7) or a list of format strings.
        name: the classifier's name (default: the model's, ``_zero_shot``).

    Returns:
        The image tower with ``normalize_features`` and a head of the
        classes' averaged, normalised prompt embeddings (`class_embeddings`)
        times ``exp(logit_scale)``, its bias ``logit_bias`` (SigLIP) or 0:
        logits ``(batch, classes)`` equal to
        ``model.logits(model.encode_images(x), class_embeddings(...).T)``,
        ``class_names`` set, and ``head_activation`` SigLIP's ``"sigmoid"``
        (each class on its own) or CLIP's ``"softmax"``. The image tower's configuration is kept whole:
        a NaFlex tower (SigLIP 2's, ``naflex=True``) gives a NaFlex `ViT`,
        which takes `keras_vit.naflex_inputs`' dict of images of any size.

    Raises:
        TypeError, ValueError: an argument of the wrong kind or value, named
            with what to pass, before any text is embedded.
    """
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a string or None, got {type(name).__name__} {name!r:.80}.")
    weights = class_embeddings(model, class_names, templates)
    tower = model.image_model
    config = tower.config.replace(num_classes=weights.shape[1], normalize_features=True,
                                  class_names=list(class_names), head_bias_init=0.0,
                                  head_activation="softmax" if model.logit_bias is None else "sigmoid")
    classifier = ViT(config, dtype=tower.dtype_policy, name=name or f"{model.name}_zero_shot")
    state = {variable.path: keras.ops.convert_to_numpy(variable) for variable in tower.weights}
    scale = float(np.exp(keras.ops.convert_to_numpy(model.logit_scale)))
    bias = 0.0 if model.logit_bias is None else float(keras.ops.convert_to_numpy(model.logit_bias))
    state["head/kernel"] = weights * scale
    state["head/bias"] = np.full(weights.shape[1], bias, np.float32)
    assign_weights(classifier, state, f"{model.name}'s towers")
    return classifier
