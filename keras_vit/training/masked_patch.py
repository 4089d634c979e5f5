"""Masked patch prediction: the self-supervised objective of the ViT paper
(Dosovitskiy et al., ICLR 2021, Sec. 4.6 and Appendix B.1.2).

Half of the patch embeddings of each image are corrupted: 80% of those are
replaced by a learnable [mask] embedding, 10% by the embedding of a random
other patch, 10% are left unchanged. From its output representation each
corrupted patch predicts its 3-bit mean colour: per channel the patch's mean
in [0, 1] quantised to 8 levels, 8^3 = 512 classes, a 512-way softmax.

The randomness lives in the data pipeline (`masked_patch_dataset`, stateless
and seeded per batch), so the model is a plain functional graph and runs are
deterministic and resumable:

    model = MaskedPatchPredictor.from_preset("vit_b16")
    model.compile(optimizer, loss=masked_patch_loss(),
                  weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()])
    model.fit(masked_patch_dataset(images_and_labels, patch_size=16, seed=0))
    vit = masked_patch_to_vit(model, num_classes=1000, image_size=384)
"""

import dataclasses
from types import MappingProxyType

import keras

from keras_vit import variants
from keras_vit.config import FIELDS
from keras_vit.config import constructor_config
from keras_vit.config import pair
from keras_vit.config import vit_config
from keras_vit.extras import require
from keras_vit.layers.patch_corruption import KEEP
from keras_vit.layers.patch_corruption import MASK
from keras_vit.layers.patch_corruption import REPLACE
from keras_vit.layers.patch_corruption import PatchCorruption
from keras_vit.model import ViT
from keras_vit.model import build_layers
from keras_vit.model import forward
from keras_vit.presets import preset_config

COLOUR_LEVELS = 8                    # 3 bits per channel
NUM_COLOURS = COLOUR_LEVELS ** 3     # 512 classes


# -- the data: corruption codes and colour targets ----------------------------

def masked_patch_targets(images, patch_size, seed, corrupt_rate=0.5, mask_rate=0.8,
                         random_rate=0.1):
    """Draws the corruption of a batch and its colour targets, in pure TF ops.

    For use in ``tf.data`` (see `masked_patch_dataset`). Each image gets
    exactly ``round(corrupt_rate * N)`` (Python's round) corrupted patches,
    chosen uniformly; each corrupted patch independently gets code 1 ([mask])
    with probability `mask_rate`, 2 (another patch's embedding) with
    `random_rate`, else 3 (unchanged). The replacement of a code-2 patch is a
    uniformly drawn other patch of the same image (never itself); every other
    patch's replacement index is its own. The random ops are stateless: the
    same `seed` gives the same draw.

    The target of a patch is its 3-bit mean colour: per channel
    ``q = min(floor(mean((x + 1) / 2) * 8), 7)`` (values outside [-1, 1]
    clipped), class ``q_r * 64 + q_g * 8 + q_b``.

    Args:
        images: ``(batch, H, W, 3)`` float in [-1, 1], channels last; H and W
            known and divisible by the patch size.
        patch_size: int or (int, int). The model's patch size.
        seed: a ``(2,)`` int tensor (or pair of ints) seeding the draw.
        corrupt_rate: float in (0, 1]. Fraction of patches corrupted (0.5).
        mask_rate: float. Probability of code 1 (mask) for a corrupted
            patch (0.8).
        random_rate: float. Probability of code 2 (random colour) for a
            corrupted patch (0.1); code 3 takes the rest.

    Returns:
        ``(inputs, targets, sample_weight)``: inputs ``{"images",
        "corruption" (batch, N) int32, "replacement" (batch, N) int32}``,
        targets ``(batch, N)`` int32 in ``[0, 512)``, sample_weight
        ``(batch, N)`` float32, 1 on corrupted patches and 0 elsewhere.

    Examples:
        ```python
        import numpy as np
        from keras_vit.training import masked_patch_targets

        images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
        inputs, targets, weights = masked_patch_targets(images, patch_size=4, seed=(0, 0))
        print(tuple(inputs["corruption"].shape), tuple(targets.shape))  # -> (2, 16) (2, 16)
        print(weights.numpy().sum(axis=1))                 # -> [8. 8.]  # round(0.5 * 16) per image

        white = np.ones((1, 8, 8, 3), "float32")
        print(masked_patch_targets(white, 4, seed=(1, 2))[1].numpy())   # -> [[511 511 511 511]]
        ```
    """
    tf = require("tensorflow", "masked_patch_targets (a tf.data step)")

    images = tf.convert_to_tensor(images, tf.float32)
    (patch_h, patch_w), (grid_h, grid_w), num_corrupt = _check_corruption(
        images, patch_size, corrupt_rate, mask_rate, random_rate)
    num_patches = grid_h * grid_w
    seed = tf.convert_to_tensor(seed)
    if seed.shape != (2,) or not seed.dtype.is_integer:
        raise ValueError(
            f"`seed` must be a (2,) int tensor, got {seed.dtype.name} of shape "
            f"{tuple(seed.shape)}."
        )
    # int64 throughout: stateless_split draws differently for int32 seeds.
    choose_seed, code_seed, other_seed = tf.unstack(
        tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3)
    )
    batch = tf.shape(images)[0]
    shape = tf.stack([batch, num_patches])

    # 3-bit mean colour of every patch.
    x = tf.reshape((images + 1.0) / 2.0, (-1, grid_h, patch_h, grid_w, patch_w, 3))
    levels = tf.floor(tf.reduce_mean(x, axis=(2, 4)) * COLOUR_LEVELS)
    levels = tf.cast(tf.clip_by_value(levels, 0, COLOUR_LEVELS - 1), tf.int32)
    levels = tf.reshape(levels, (-1, num_patches, 3))
    targets = tf.reduce_sum(levels * [COLOUR_LEVELS**2, COLOUR_LEVELS, 1], axis=-1)

    # Exactly num_corrupt patches per image: those of the lowest random ranks.
    order = tf.argsort(tf.random.stateless_uniform(shape, choose_seed), axis=1)
    corrupted = tf.argsort(order, axis=1) < num_corrupt
    draw = tf.random.stateless_uniform(shape, code_seed)
    codes = tf.where(draw < mask_rate, MASK, tf.where(draw < mask_rate + random_rate, REPLACE, KEEP))
    corruption = tf.where(corrupted, codes, 0)

    # Another patch of the same image: draw from N - 1 and skip the patch itself.
    index = tf.broadcast_to(tf.range(num_patches), shape)
    other = tf.random.stateless_uniform(
        shape, other_seed, minval=0, maxval=num_patches - 1, dtype=tf.int32
    )
    other += tf.cast(other >= index, tf.int32)
    replacement = tf.where(tf.equal(corruption, REPLACE), other, index)

    inputs = {"images": images, "corruption": corruption, "replacement": replacement}
    return inputs, targets, tf.cast(corrupted, tf.float32)


def _check_corruption(images, patch_size, corrupt_rate, mask_rate, random_rate):
    """`masked_patch_targets`'s arguments checked: ``(patch size, grid,
    patches corrupted per image)``."""
    patch_h, patch_w = pair(patch_size, "patch_size")
    if images.shape.rank != 4 or None in images.shape[1:] or images.shape[-1] != 3:
        raise ValueError(
            "masked_patch_targets takes RGB images of shape (batch, H, W, 3) with "
            f"known H and W, got shape {tuple(images.shape)}. The 512 colour classes "
            "are 3 bits for each of 3 channels: convert grayscale images to RGB."
        )
    height, width = images.shape[1], images.shape[2]
    if height % patch_h or width % patch_w:
        raise ValueError(
            f"Images of {height}x{width} do not divide into {patch_h}x{patch_w} "
            "patches. Use the model's image size and patch size."
        )
    grid_h, grid_w = height // patch_h, width // patch_w
    num_patches = grid_h * grid_w
    if num_patches < 2:
        raise ValueError(
            f"{height}x{width} images in {patch_h}x{patch_w} patches make one patch; "
            "masked patch prediction needs at least 2 per image."
        )
    num_corrupt = round(corrupt_rate * num_patches)
    if not 0 < corrupt_rate <= 1 or num_corrupt < 1:
        raise ValueError(
            f"corrupt_rate {corrupt_rate} corrupts {num_corrupt} of {num_patches} "
            "patches; it must be in (0, 1] and corrupt at least one patch."
        )
    if mask_rate < 0 or random_rate < 0 or mask_rate + random_rate > 1:
        raise ValueError(
            f"mask_rate {mask_rate} and random_rate {random_rate} must be "
            "non-negative and sum to at most 1 (the rest are kept unchanged)."
        )

    return (patch_h, patch_w), (grid_h, grid_w), num_corrupt


def masked_patch_dataset(dataset, patch_size, seed, start_batch=0, shard=None, **rates):
    """Maps `masked_patch_targets` over a ``tf.data.Dataset`` of batches.

    The dataset yields ``(images, labels)`` batches (labels are dropped);
    batch ``i`` is corrupted with the seed ``(seed, start_batch + i)``, so a
    run is the same every time and, resumed at batch k on a dataset that
    starts there, with ``start_batch=k``, continues the same sequence.
    `rates` are `masked_patch_targets`'s ``corrupt_rate``, ``mask_rate`` and
    ``random_rate``. The result feeds `MaskedPatchPredictor.fit` as
    ``(inputs, targets, sample_weight)``. With ``shard=(i, n)`` (the
    dataset is pipeline i's rows of each global batch, see
    `keras_vit.data.input_pipeline`) each pipeline draws its own corruption,
    with the seed ``(seed, n * batch + i)``.

    Examples:
        ```python
        from keras_vit.data import input_pipeline
        from keras_vit.training import masked_patch_dataset

        images = input_pipeline("digits", "train", image_size=16, batch_size=32, training=True,
                                preprocess="resize", flip=False, seed=0)
        inputs, targets, weights = next(iter(masked_patch_dataset(images, patch_size=4, seed=0)))
        print(inputs["images"].shape, inputs["corruption"].shape, targets.dtype)
        # -> (32, 16, 16, 3) (32, 16) <dtype: 'int32'>
        ```
    """
    tf = require("tensorflow", "masked_patch_dataset (a tf.data pipeline)")

    shard_index, shard_count = shard or (0, 1)

    def corrupt(index, batch):
        batch_seed = tf.stack([tf.constant(seed, tf.int64), index * shard_count + shard_index])
        return masked_patch_targets(batch[0], patch_size, batch_seed, **rates)

    return dataset.enumerate(start=start_batch).map(corrupt, num_parallel_calls=tf.data.AUTOTUNE)


# -- the loss -----------------------------------------------------------------

def masked_patch_loss():
    """Softmax cross-entropy averaged over the corrupted patches only.

    With the sample weights of `masked_patch_targets` (1 on corrupted
    patches), Keras's ``"mean_with_sample_weight"`` reduction divides the
    weighted sum by the sum of the weights; the default
    ``"sum_over_batch_size"`` would divide by all ``batch * N`` patches.
    For the accuracy over the corrupted patches, pass
    ``keras.metrics.SparseCategoricalAccuracy()`` as a weighted metric
    (``compile(weighted_metrics=[...])``).
    """
    return keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight", name="masked_patch_loss"
    )


# -- the model ----------------------------------------------------------------

# The settings a masked patch model fixes itself: no head, token pooling's
# [class] token, RGB channels last, no ResNet stem (checked first: its
# receptive fields overlap).
OWN_SETTINGS = MappingProxyType(dict(
    num_classes=0, pooling="token", representation_size=None, head_bias_init=0.0,
    fc_norm=False, distillation=False, distillation_head=True, class_token=None, num_channels=3,
    class_names=None, data_format="channels_last", resnet_block_units=None, resnet_width_factor=1,
))
# The ViTConfig fields it takes: every other one.
BACKBONE_FIELDS = tuple(field for field in FIELDS if field not in OWN_SETTINGS)


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedPatchPredictor(keras.Model):
    """A ViT that predicts the 3-bit mean colour of corrupted patches.

    The backbone is that of `ViT` with token pooling (Eq. 1-4), built by
    the same `keras_vit.model.build_layers` (its ``parts``, with a
    ``patch_corruption`` layer and no pooling), so its layers have exactly the
    names and variable paths of a `ViT`'s (``patch_embedding``, ``class_token``, ``position_embedding``,
    ``encoder_block_{i}``, ``encoder_norm``) and its weights fine-tune with
    `masked_patch_to_vit`. Right after the patch embedding a
    `PatchCorruption` layer (``patch_corruption``) corrupts the patches the
    inputs say; after the encoder norm the prefix tokens are dropped and a
    zero-initialised linear head (``mpp_head``, computed in float32 also
    under a mixed-precision policy) gives 512 logits per patch.

    Images are RGB and channels last; there is no ResNet stem (its
    overlapping receptive fields would show a corrupted patch's pixels to
    its neighbours).

    Args:
        config: a `keras_vit.ViTConfig` (its head, pooling, channels and data
            format are this model's own), or None to make one of the keyword
            arguments.
        dtype: as for `ViT`.
        **kwargs: the `ViTConfig` fields in ``BACKBONE_FIELDS`` (every field
            but those of ``OWN_SETTINGS``: ``image_size``, ``patch_size``,
            ``num_layers``, ...), and Keras's ``name`` and ``trainable``.

    Inputs: a dict ``{"images": (batch, H, W, 3) float in [-1, 1],
        "corruption": (batch, N) int32, "replacement": (batch, N) int32}``,
        as `masked_patch_targets` makes them.
    Output: ``(batch, N, 512)`` float32 logits, one row per patch.

    Examples:
        >>> import numpy as np
        >>> model = MaskedPatchPredictor(image_size=16, patch_size=4, num_layers=1,
        ...                              num_heads=2, hidden_dim=8, mlp_dim=16)
        >>> codes = np.zeros((2, 16), "int32")
        >>> logits = model({"images": np.zeros((2, 16, 16, 3)), "corruption": codes,
        ...                 "replacement": np.tile(np.arange(16, dtype="int32"), (2, 1))})
        >>> tuple(logits.shape)
        (2, 16, 512)

        ```python
        import numpy as np
        from keras_vit.training import MaskedPatchPredictor

        model = MaskedPatchPredictor(image_size=16, patch_size=4, num_layers=1, num_heads=2,
                                     hidden_dim=8, mlp_dim=16)
        inputs = {
            "images": np.zeros((2, 16, 16, 3), "float32"),
            "corruption": np.zeros((2, 16), "int32"),
            "replacement": np.tile(np.arange(16, dtype="int32"), (2, 1)),
        }
        print(tuple(model(inputs).shape))            # -> (2, 16, 512)
        print(model.grid_size, model.num_prefix_tokens)   # -> (4, 4) 1
        print(MaskedPatchPredictor.from_preset("ViT-Ti/16", image_size=32, num_layers=1).hidden_dim)   # -> 192
        ```
    """

    def __init__(self, config=None, dtype=None, **kwargs):
        config = constructor_config("MaskedPatchPredictor", config, kwargs, BACKBONE_FIELDS,
                              " (the head, pooling and channels are the model's own)")
        if config.resnet_block_units is not None:
            raise ValueError(
                "masked patch prediction needs a plain ViT, not a hybrid with a ResNet stem: "
                "its overlapping receptive fields would show a corrupted patch's pixels to its "
                "neighbours. Set resnet_block_units=None."
            )
        own = {key: value for key, value in OWN_SETTINGS.items() if getattr(config, key) != value}
        config = config.replace(**own) if own else config
        parts = dataclasses.replace(
            build_layers(config, dtype), pooling=None,
            patch_corruption=PatchCorruption(dtype=dtype, name="patch_corruption"))
        head = keras.layers.Dense(NUM_COLOURS, kernel_initializer="zeros", dtype="float32",
                                  name="mpp_head")

        num_patches = config.grid_size[0] * config.grid_size[1]
        inputs = {
            "images": keras.Input(shape=config.input_shape, name="images"),
            "corruption": keras.Input(shape=(num_patches,), dtype="int32", name="corruption"),
            "replacement": keras.Input(shape=(num_patches,), dtype="int32", name="replacement"),
        }
        x = forward(parts, inputs["images"], corruption=(inputs["corruption"], inputs["replacement"]))
        outputs = head(x[:, config.num_prefix_tokens:])
        kwargs.setdefault("name", "masked_patch_predictor")
        super().__init__(inputs, outputs, dtype=dtype, **kwargs)

        self.config = config
        self.parts = parts
        for key in BACKBONE_FIELDS:
            setattr(self, key, getattr(config, key))
        self.grid_size = config.grid_size
        self.num_prefix_tokens = config.num_prefix_tokens
        self.dtype_policy = parts.patch_embedding.dtype_policy  # as ViT: functional models drop it

    @classmethod
    def from_preset(cls, name, **overrides):
        """A preset architecture (``"vit_b16"`` or ``"ViT-B/16"``), freshly
        initialised; keyword arguments override any of its settings."""
        config = preset_config(name)
        if config.resnet_block_units is not None:
            raise ValueError(
                f"{name!r} is a hybrid with a ResNet stem; masked patch prediction "
                "needs a plain ViT (the stem's overlapping receptive fields would show "
                "a corrupted patch's pixels to its neighbours). Use e.g. 'vit_b16'."
            )
        return cls(config, **overrides)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            **{key: value for key, value in self.config.to_dict().items() if key in BACKBONE_FIELDS},
        }

    @classmethod
    def from_config(cls, config):
        return cls(**variants.with_policy(config))


def masked_patch_to_vit(model, num_classes, image_size=None, **overrides):
    """A `ViT` for fine-tuning, with `model`'s pre-trained backbone.

    The ViT has `model`'s architecture (token pooling), a new zero-initialised
    head of `num_classes` (as the paper fine-tunes) and every backbone weight
    of `model`, copied by variable path; at another `image_size` the position
    embeddings are 2-D interpolated (bilinear, Sec. 3.2). The [mask]
    embedding and the colour head are left behind. Keyword arguments override
    the ViT's other settings (e.g. ``dropout_rate``, ``dtype``); a pooling
    without the [class] token is refused, since the backbone has one.

    Examples:
        ```python
        import numpy as np
        from keras_vit.training import MaskedPatchPredictor, masked_patch_to_vit

        model = MaskedPatchPredictor(image_size=16, patch_size=4, num_layers=1, num_heads=2,
                                     hidden_dim=16, mlp_dim=32)
        vit = masked_patch_to_vit(model, num_classes=10, image_size=32, dropout_rate=0.1)
        print(vit.grid_size, tuple(vit(np.zeros((2, 32, 32, 3), "float32")).shape))  # -> (8, 8) (2, 10)
        ```
    """
    from keras_vit.weights import transfer_weights

    config = {k: v for k, v in model.get_config().items() if k not in ("name", "trainable")}
    config.update(num_classes=num_classes, image_size=image_size or model.image_size,
                  name="vit", **overrides)
    pooling = config.get("pooling", "token")
    if not vit_config(None, {k: v for k, v in config.items() if k in FIELDS}).uses_class_token:
        raise ValueError(
            f"pooling {pooling!r} has no [class] token, but the masked patch model "
            "was trained with one; fine-tune with pooling 'token' (the default)."
        )
    vit = ViT.from_config(config)
    transfer_weights(model, vit, skip=("patch_corruption", "mpp_head", "head", "pre_logits"))
    return vit
