"""The building blocks of the Vision Transformer, as Keras layers."""

from keras_vit.layers.attention import MultiHeadDotProductAttention
from keras_vit.layers.attention_pooling import MultiHeadAttentionPooling
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_norm import LayerNormalization
from keras_vit.layers.layer_norm import normalization
from keras_vit.layers.mlp import MlpBlock
from keras_vit.layers.patch_corruption import PatchCorruption
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.patch_embedding import resize_patch_kernel
from keras_vit.layers.position_embedding import PositionEmbedding
from keras_vit.layers.position_embedding import resample_position_embeddings
from keras_vit.layers.prompts import VisualPrompts
from keras_vit.layers.prompts import vpt_initializer
from keras_vit.layers.resnet import BottleneckUnit
from keras_vit.layers.rotary_embedding import RotaryPositionEmbedding
from keras_vit.layers.rotary_embedding import rope_angles
from keras_vit.layers.resnet import ResNetStem
from keras_vit.layers.resnet import StandardizedConv2D
from keras_vit.layers.segmentation_head import LinearSegmentationHead
from keras_vit.layers.text import TextEmbedding
from keras_vit.layers.text import TextPooling
from keras_vit.layers.token_map import TokenMap
from keras_vit.layers.token_pooling import TokenPooling
from keras_vit.layers.transformer_encoder import TransformerEncoder

__all__ = [
    "BottleneckUnit",
    "ClassToken",
    "DropPath",
    "LayerNormalization",
    "LinearSegmentationHead",
    "MlpBlock",
    "MultiHeadAttentionPooling",
    "MultiHeadDotProductAttention",
    "PatchCorruption",
    "PatchEmbedding",
    "PositionEmbedding",
    "ResNetStem",
    "RotaryPositionEmbedding",
    "StandardizedConv2D",
    "TextEmbedding",
    "TextPooling",
    "TokenMap",
    "TokenPooling",
    "TransformerEncoder",
    "VisualPrompts",
    "normalization",
    "resample_position_embeddings",
    "resize_patch_kernel",
    "rope_angles",
    "vpt_initializer",
]
