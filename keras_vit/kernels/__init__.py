"""Backend fast paths, one function per operation, each beside its plain
``keras.ops`` (or Keras layer) reference.

The layers (`keras_vit.layers`) are the paper's math and call these. A fast
path runs only where it computes what the Keras layer would: a float kernel
that is not quantized, float8 or LoRA-enabled, outside `keras_layers_only`
(which `ViT.export` enters); otherwise the Keras layer or op runs. What each
path gains, measured, is in docs/performance.md.

| operation | fast path | reference |
|---|---|---|
| `dense` | JAX CPU: `matmul`, gradient GEMMs in sequence | `dense_reference`: ``layer(x)`` |
| `gelu` | TF, JAX CPU: gradient written out (TF CPU: XLA) | `gelu_reference`: ``ops.gelu`` |
| `fused_attention` | JAX/TF CPU: heads-first; JAX GPU: padded cuDNN | `attention_reference` |
| `layer_norm` | JAX/TF CPU: gradient written out | `layer_norm_reference`: ``layer(x)`` |
| optimizers' updates | TF ``ResourceApply*``, torch fused | `adam_reference`, `momentum_reference` |
"""

from keras_vit.kernels._platform import backend_platform
from keras_vit.kernels._platform import fast_paths_enabled
from keras_vit.kernels._platform import keras_layers_only
from keras_vit.kernels.attention import attention_reference
from keras_vit.kernels.attention import fused_attention
from keras_vit.kernels.attention import heads_first_attention
from keras_vit.kernels.attention import padded_attention
from keras_vit.kernels.attention import per_image_attention
from keras_vit.kernels.projection import dense
from keras_vit.kernels.projection import dense_reference
from keras_vit.kernels.projection import gelu
from keras_vit.kernels.projection import gelu_reference
from keras_vit.kernels.projection import matmul
from keras_vit.kernels.projection import plain_projection
from keras_vit.kernels.normalization import layer_norm
from keras_vit.kernels.normalization import layer_norm_reference
from keras_vit.kernels.optimizers import adam_reference
from keras_vit.kernels.optimizers import momentum_reference

__all__ = [
    "adam_reference",
    "attention_reference",
    "backend_platform",
    "dense",
    "dense_reference",
    "fast_paths_enabled",
    "fused_attention",
    "gelu",
    "gelu_reference",
    "heads_first_attention",
    "keras_layers_only",
    "layer_norm",
    "layer_norm_reference",
    "matmul",
    "momentum_reference",
    "padded_attention",
    "per_image_attention",
    "plain_projection",
]
