"""The corruption of patch embeddings for masked patch prediction (Sec. 4.6)."""

import keras
from keras import ops

# Corruption codes, one per patch. 0: untouched (and not predicted).
MASK = 1      # replaced by the learnable [mask] embedding
REPLACE = 2   # replaced by the embedding of another patch of the same image
KEEP = 3      # corrupted (predicted) but left unchanged


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchCorruption(keras.layers.Layer):
    """Corrupts patch embeddings ``x_p^i E`` as in masked patch prediction.

    Sec. 4.6 and Appendix B.1.2 of the paper, after BERT: of the corrupted
    patches, 80% are replaced by a learnable [mask] embedding, 10% by the
    embedding of a random other patch, 10% are left unchanged. Which patch
    gets which treatment is an input (drawn in the data pipeline by
    ``keras_vit.training.masked_patch.masked_patch_targets``), so the layer
    is deterministic and has one weight: the [mask] embedding. It acts on the
    patch embeddings before the [class] token and the position embeddings are
    added, so a replaced patch keeps its own position.

    Args:
        initializer: initializer of the [mask] embedding. Defaults to
            normal(0.02), as BERT's (and BEiT's, MAE's) mask token: the
            original code is not public, and a zero embedding would equal the
            embedding of a mid-grey patch (input 0, zero bias) at
            initialisation.

    Call arguments:
        patches: ``(batch, N, D)`` float, the patch embeddings.
        corruption: ``(batch, N)`` int codes: 0 untouched, 1 ([mask]),
            2 (replaced by patch ``replacement[b, n]``), 3 (kept).
        replacement: ``(batch, N)`` int, for code 2 the index in ``[0, N)`` of
            the patch of the same image whose embedding is used; ignored for
            other codes.

    Output shape: ``(batch, N, D)``.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit.layers import PatchCorruption

        layer = PatchCorruption()
        patches = np.arange(2 * 4 * 3, dtype="float32").reshape(2, 4, 3)
        corruption = np.array([[0, 1, 2, 3], [2, 0, 0, 0]], "int32")
        replacement = np.array([[0, 1, 0, 3], [3, 1, 2, 3]], "int32")
        out = keras.ops.convert_to_numpy(layer(patches, corruption, replacement))
        print(tuple(out.shape), tuple(layer.mask_embedding.shape))  # -> (2, 4, 3) (3,)
        print(np.array_equal(out[0, 2], patches[0, 0]), np.array_equal(out[1, 0], patches[1, 3]))   # -> True True
        print(np.allclose(out[0, 1], keras.ops.convert_to_numpy(layer.mask_embedding)))   # -> True
        ```
    """

    def __init__(self, initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(
            initializer or keras.initializers.RandomNormal(stddev=0.02)
        )

    def build(self, patches_shape, corruption_shape=None, replacement_shape=None):
        hidden_dim = tuple(patches_shape)[-1]
        self.mask_embedding = self.add_weight(
            shape=(hidden_dim,), initializer=self.initializer, name="mask_embedding"
        )

    def call(self, patches, corruption, replacement):
        corruption = ops.expand_dims(corruption, -1)
        others = ops.take_along_axis(patches, ops.expand_dims(replacement, -1), axis=1)
        x = ops.where(ops.equal(corruption, REPLACE), others, patches)
        return ops.where(
            ops.equal(corruption, MASK), ops.cast(self.mask_embedding, x.dtype), x
        )

    def compute_output_shape(self, patches_shape):
        return tuple(patches_shape)

    def get_config(self):
        config = super().get_config()
        config.update(initializer=keras.initializers.serialize(self.initializer))
        return config
