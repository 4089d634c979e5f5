"""Input pipelines for training and evaluating ViT with `model.fit` on any
Keras backend: image sources (the embedded digits, TFDS, image folders),
the paper's preprocessing, Keras core augmentations, exact determinism; the 19 tasks of VTAB-1k; and
canvases of the embedded digits for semantic segmentation.
"""

from keras_vit.extras import require

# Every module here runs on tf.data: named with its extra when TensorFlow is missing.
require("tensorflow", "keras_vit.data (tf.data pipelines, image decoding)")

from keras_vit.data.pipeline import concatenate_shards
from keras_vit.data.pipeline import input_pipeline
from keras_vit.data.preprocessing import DecodeError
from keras_vit.data.preprocessing import op_message
from keras_vit.data.preprocessing import read_images
from keras_vit.data.preprocessing import read_pixels
from keras_vit.data.segmentation import SEGMENTATION_CLASSES
from keras_vit.data.segmentation import digit_segmentation
from keras_vit.data.sources import DATASETS
from keras_vit.data.sources import Source
from keras_vit.data.sources import load_source
from keras_vit.data.sources import unreadable_files
from keras_vit.data.vtab import VTAB_DIGITS
from keras_vit.data.vtab import VTAB_TASKS
from keras_vit.data.vtab import VtabTask

__all__ = [
    "DATASETS",
    "DecodeError",
    "SEGMENTATION_CLASSES",
    "Source",
    "concatenate_shards",
    "digit_segmentation",
    "input_pipeline",
    "load_source",
    "op_message",
    "read_images",
    "read_pixels",
    "unreadable_files",
    "VTAB_DIGITS",
    "VTAB_TASKS",
    "VtabTask",
]
