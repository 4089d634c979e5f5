"""keras_vit: the Vision Transformer of Dosovitskiy et al. (ICLR 2021) for Keras 3."""

import gc as _gc

# Importing Keras and its backend makes 250,000-500,000 objects and no garbage,
# so the collector's full passes over them while they are made free nothing
# and only add to the import's time (most on PyTorch and TensorFlow, whose
# imports make the most objects). It is off meanwhile, and on again once the
# package is in.
_collecting = _gc.isenabled()
_gc.disable()
try:
    from keras_vit import kernels
    from keras_vit import layers
    from keras_vit.config import ViTConfig
    from keras_vit.image_text import ImageTextModel
    from keras_vit.image_text import TextTransformer
    from keras_vit.model import ViT
    from keras_vit.text_tokenizer import TextTokenizer
    from keras_vit.presets import presets
    from keras_vit.weights.pretrained import pretrained
    from keras_vit.zero_shot import zero_shot_classifier
finally:
    if _collecting:
        _gc.enable()

__version__ = "0.1.0"

__all__ = ["ImageTextModel", "TextTokenizer", "TextTransformer", "ViT", "ViTConfig", "kernels",
           "layers", "presets", "pretrained", "zero_shot_classifier", "__version__"]
