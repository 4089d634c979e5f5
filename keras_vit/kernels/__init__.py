"""Backend fast paths, one function per operation, each beside its plain
``keras.ops`` (or Keras layer) reference.

The layers (`keras_vit.layers`) are the paper's math and call these. Which
path runs is decided in one place, `routes.route`, over one table,
`routes.FAST_PATHS` (this table; a test holds them equal): a fast path runs
only where it computes what the Keras layer would: a float kernel that is
not quantized, float8 or LoRA-enabled, or an int8 one quantized by Keras's
defaults (to the input's int8 rounding), outside `keras_layers_only` (which
`ViT.export` enters), attention weights neither returned nor dropped out;
otherwise the Keras layer or op runs. What each path gains, measured, is in
docs/performance.md.

| operation | where | fast path | reference |
|---|---|---|---|
| `dense` | JAX CPU | `matmul`: the kernel through `matmul` | `dense_reference`: ``layer(x)`` |
| `int8_dense` | TensorFlow CPU | `xla_int8`: Keras's int8 call compiled by XLA | `int8_dense_reference` |
| `int8_dense` | PyTorch | `dynamic_int8`: ``torch.ops.quantized.linear_dynamic`` on CPU tensors outside autograd, the kernel packed once | `int8_dense_reference` |
| `matmul` | JAX CPU | `sequential_gradient`: the gradient's GEMMs in sequence; bfloat16 products with a float32 result, rounded, their gradient's transposed operands written out | ``ops.matmul`` |
| `gelu` | JAX CPU | `gradient_from_x`: the gradient written out | `gelu_reference`: ``ops.gelu`` |
| `gelu` | TensorFlow CPU | `xla_gradient_from_x`: the same, each an XLA kernel | `gelu_reference` |
| `layer_norm` | JAX CPU, TensorFlow CPU | `written_out_gradient` | `layer_norm_reference`: the Keras layer's ``call`` |
| `attention` | JAX CPU, TensorFlow CPU | `heads_first` (JAX inference: `per_image`) | `attention_reference` |
| `attention` | JAX GPU | `padded_cudnn`: 16 bits, an odd number of tokens | `attention_reference` |
| `optimizer` | TensorFlow | `resource_apply`: ``ResourceApply*`` | `adam_reference`, `momentum_reference` |
| `optimizer` | PyTorch | `fused`: ``torch.optim``'s fused kernels | `adam_reference`, `momentum_reference` |
"""

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
from keras_vit.kernels.normalization import layer_norm
from keras_vit.kernels.normalization import layer_norm_reference
from keras_vit.kernels.quantized import int8_dense
from keras_vit.kernels.quantized import int8_dense_reference
from keras_vit.kernels.optimizers import adam_reference
from keras_vit.kernels.optimizers import momentum_reference
from keras_vit.kernels.routes import FAST_PATHS
from keras_vit.kernels.routes import backend_platform
from keras_vit.kernels.routes import int8_projection
from keras_vit.kernels.routes import plain_projection
from keras_vit.kernels.routes import route

__all__ = [
    "FAST_PATHS",
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
    "int8_dense",
    "int8_dense_reference",
    "int8_projection",
    "keras_layers_only",
    "layer_norm",
    "layer_norm_reference",
    "matmul",
    "momentum_reference",
    "padded_attention",
    "per_image_attention",
    "plain_projection",
    "route",
]
