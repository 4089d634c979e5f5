"""keras_vit: the Vision Transformer of Dosovitskiy et al. (ICLR 2021) for Keras 3."""

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

__version__ = "0.1.0"

__all__ = ["ImageTextModel", "TextTokenizer", "TextTransformer", "ViT", "ViTConfig", "kernels",
           "layers", "presets", "pretrained", "zero_shot_classifier", "__version__"]
