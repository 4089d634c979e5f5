"""keras_vit: the Vision Transformer of Dosovitskiy et al. (ICLR 2021) for Keras 3."""

import gc as _gc

# Importing Keras and its backend makes 250,000-500,000 objects and no garbage,
# and the collector's full passes over them while they are made are wasted:
# `import keras_vit` took 4.7-4.9 s with the collector on and 3.8-3.9 s without
# on PyTorch, 3.9-4.9 s and 3.4-4.3 s on TensorFlow, 2.2-2.6 s and 2.1-2.2 s
# on JAX (Intel Xeon, 2026-11-26). It is on again once the package is in.
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
