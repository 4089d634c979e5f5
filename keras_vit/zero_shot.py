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
    paper's 80), ``"simple"`` (open_clip's 7), or a list of strings with
    one ``{}`` each, where the class name goes."""
    if isinstance(templates, str):
        if templates not in TEMPLATES:
            raise ValueError(f"Unknown templates {templates!r}: use {sorted(TEMPLATES)} or a list "
                             "of format strings such as ['a photo of a {}.'].")
        return TEMPLATES[templates]
    templates = tuple(templates)
    bad = [t for t in templates if not isinstance(t, str) or t.count("{}") != 1]
    if not templates or bad:
        raise ValueError(f"Each template must be a string with one '{{}}' for the class name, "
                         f"such as 'a photo of a {{}}.'; got {bad[:3] if bad else 'none'}.")
    return templates


def class_embeddings(model, class_names, templates="imagenet", batch_size=256):
    """The classes' zero-shot weights: each class's prompts embedded by the
    text tower (``predict`` in batches of `batch_size`: the 80 ImageNet
    prompts of 1000 classes are 80,000 texts), normalised, averaged, and
    normalised again (open_clip's ``build_zero_shot_classifier``).

    Returns: float32 ``(E, classes)``.
    """
    templates = prompt_templates(templates)
    class_names = [str(name) for name in class_names]
    if not class_names:
        raise ValueError("class_names is empty: give at least one class name.")
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
        class_names: the classes' names, put into the prompts.
        templates: ``"imagenet"`` (the 80 prompts of the CLIP paper),
            ``"simple"`` (open_clip's 7) or a list of format strings.
        name: the classifier's name (default: the model's, ``_zero_shot``).

    Returns:
        The image tower with ``normalize_features`` and a head of the
        classes' averaged, normalised prompt embeddings (`class_embeddings`)
        times ``exp(logit_scale)``, its bias ``logit_bias`` (SigLIP) or 0:
        logits ``(batch, classes)`` equal to
        ``model.logits(model.encode_images(x), class_embeddings(...).T)``, and
        ``class_names`` set.
    """
    if not isinstance(model, ImageTextModel):
        raise ValueError(f"zero_shot_classifier takes a keras_vit.ImageTextModel, got "
                         f"{type(model).__name__}.")
    weights = class_embeddings(model, class_names, templates)
    tower = model.image_model
    config = tower.config.replace(num_classes=weights.shape[1], normalize_features=True,
                                  class_names=[str(c) for c in class_names], head_bias_init=0.0)
    classifier = ViT(config, dtype=tower.dtype_policy, name=name or f"{model.name}_zero_shot")
    state = {variable.path: keras.ops.convert_to_numpy(variable) for variable in tower.weights}
    scale = float(np.exp(keras.ops.convert_to_numpy(model.logit_scale)))
    bias = 0.0 if model.logit_bias is None else float(keras.ops.convert_to_numpy(model.logit_bias))
    state["head/kernel"] = weights * scale
    state["head/bias"] = np.full(weights.shape[1], bias, np.float32)
    assign_weights(classifier, state, f"{model.name}'s towers")
    return classifier
