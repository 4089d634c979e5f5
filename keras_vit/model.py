"""The Vision Transformer (Dosovitskiy et al., ICLR 2021) as one Keras model.

    z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos           (Eq. 1)
    z'_l = MSA(LN(z_{l-1})) + z_{l-1},        l = 1..L        (Eq. 2)
    z_l = MLP(LN(z'_l)) + z'_l,               l = 1..L        (Eq. 3)
    y = LN(z_L^0)                                             (Eq. 4)

then the head (a linear layer, optionally after a tanh "pre-logits" layer).
"""

import keras

from keras_vit import layers as vit_layers
from keras_vit.layers._utils import pair
from keras_vit.layers._utils import standardize_data_format
from keras_vit.layers.resnet import resnet_stride

POOLINGS = ("token", "gap", "map", "none")


def uses_class_token(pooling, position_embedding):
    """Whether the model has a [class] token: for token pooling, and for the
    token sequence (``"none"``) when position embeddings are learned."""
    return pooling == "token" or (pooling == "none" and position_embedding == "learned")


def _check_ranges(**arguments):
    """Each ``name=(value, lowest, kind)``: an int at least `lowest`, or for
    floats a number above `lowest`; a ValueError names the argument."""
    for name, (value, lowest, kind) in arguments.items():
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= lowest
            need = f"an int >= {lowest}"
        else:
            ok = isinstance(value, (int, float)) and value > lowest
            need = f"a number > {lowest}"
        if not ok:
            raise ValueError(f"`{name}` must be {need}, got {value!r}.")


def _block_names(num_layers):
    return [f"encoder_block_{i}" for i in range(num_layers)]


def _forward(layer, images, training=None, record=None, corruption=None):
    """Runs the model's layers in order; `layer(name)` returns each one.

    Shared by the functional graph (record=None) and `ViT.intermediates`,
    which records every stage and the attention weights of every block.
    `corruption`, the (codes, replacement) inputs of masked patch prediction,
    goes to the "patch_corruption" layer of a model that has one.
    """
    x = images
    if layer.has("resnet"):
        x = layer("resnet")(x)
    x = layer("patch_embedding")(x)                           # x_p E
    if layer.has("patch_corruption"):                         # Sec. 4.6
        x = layer("patch_corruption")(x, *corruption)
    for name in ("registers", "class_token"):
        if layer.has(name):
            x = layer(name)(x)                                # [x_class; ...]
    x = layer("position_embedding")(x)                        # + E_pos
    x = layer("embedding_dropout")(x, training=training)
    if record is not None:
        record["embeddings"] = x
    # Eq. 4 reads only z_L^0: with token pooling the last block updates the
    # [class] token alone (its query attends to every token), the same numbers
    # for 85% of a block's work less. `intermediates` (record) keeps every token.
    pooling = layer("pooling") if layer.has("pooling") else None
    class_only = (record is None and isinstance(pooling, vit_layers.TokenPooling)
                  and pooling.mode == "token")
    for i, name in enumerate(layer.blocks):                   # Eq. 2-3
        if record is None:
            last = class_only and i == len(layer.blocks) - 1
            x = layer(name)(x, training=training, num_queries=1 if last else None)
        else:
            x, record[f"attention_{i}"] = layer(name)(
                x, training=training, return_attention_scores=True
            )
            record[name] = x
    x = layer("encoder_norm")(x)                              # LN, Eq. 4
    if record is not None:
        record["encoded"] = x
    if layer.has("pooling"):
        x = layer("pooling")(x)                               # y
    if layer.has("pre_logits"):
        x = layer("pre_logits")(x)
    if record is not None:
        record["features"] = x
    if layer.has("head"):
        x = layer("head")(x)
        if record is not None:
            record["logits"] = x
    return x


class _Layers:
    """Name -> layer lookup for `_forward`, over a dict or a built model."""

    def __init__(self, lookup, names, num_layers):
        self._lookup, self._names = lookup, set(names)
        self.blocks = _block_names(num_layers)

    def has(self, name):
        return name in self._names

    def __call__(self, name):
        return self._lookup(name)


@keras.saving.register_keras_serializable(package="keras_vit")
class ViT(keras.Model):
    """Vision Transformer: image in, logits (or features) out.

    Builds the model of "An Image is Worth 16x16 Words" as a functional Keras
    model that trains with ``fit``, serializes to ``.keras`` and runs on
    TensorFlow, JAX and PyTorch. Defaults are ViT-B/16 at 224 px, initialised
    as the original code: zero head kernel and [class] token, normal(0.02)
    position embeddings, Xavier-uniform dense kernels.

    Args:
        image_size: int or (int, int). Input height and width.
        patch_size: int or (int, int). Patch size P; with a ResNet stem, the
            patch size on its feature map (1 for R50+ViT-B/16).
        num_layers: int. L, the number of encoder blocks.
        num_heads: int. Attention heads per block.
        hidden_dim: int. D, the token width.
        mlp_dim: int. Hidden size of each MLP.
        num_classes: int. Classes of the linear head; 0 returns the features.
        pooling: ``"token"`` ([class] token, Eq. 4), ``"gap"`` (mean of patch
            tokens), ``"map"`` (attention pooling) or ``"none"`` (every
            token; a head is then applied per token).
        representation_size: int or None. Width of the tanh pre-logits layer
            used in pre-training; None leaves it out.
        dropout_rate: float. Dropout after dense layers (not q/k/v) and after
            adding the position embeddings.
        attention_dropout_rate: float. Dropout on attention weights.
        drop_path_rate: float. Stochastic depth, rising linearly from 0 in
            the first block to this rate in the last.
        layer_norm_epsilon: float. Defaults to 1e-6, the original.
        gelu_approximate: bool. tanh GELU (original and Google checkpoints)
            or exact erf GELU (timm, most Hugging Face configs).
        qkv_bias: bool. Biases on query, key and value.
        layer_scale_init: float or None. LayerScale initial value.
        num_registers: int. Register tokens after the [class] token.
        position_embedding: ``"learned"`` (1-D, the paper) or ``"sincos2d"``.
        resnet_block_units: tuple of ints or None. A BiT ResNet stem with this
            many units per stage (R50 for ViT: ``(3, 4, 9)``); None for none.
        resnet_width_factor: float. Width multiplier of the ResNet stem: its
            root has ``int(64 * resnet_width_factor)`` channels (vit_jax).
        head_bias_init: float. Initial head bias (-10 in i21k pre-training).
        num_channels: int. Input channels.
        class_names: list of str or None. The label of each output class,
            kept with the model (``keras-vit predict`` prints them).
        data_format: ``"channels_last"`` or ``"channels_first"``.
        dtype: a dtype policy such as ``"mixed_bfloat16"``.

    Input shape: ``(batch, H, W, C)`` (or ``(batch, C, H, W)``).
    Output shape: ``(batch, num_classes)``, ``(batch, features)`` when
        ``num_classes=0``, or ``(batch, tokens, ...)`` with ``pooling="none"``.

    With ``pooling="token"`` Eq. 4 reads only the [class] token's row of
    z_L, so the last block updates that token alone (its query attends to
    every token; `TransformerEncoder`'s ``num_queries=1``): the same outputs
    and gradients, 7-9% faster to train and run a ViT-S/16 or B/16. In the
    functional graph that block and ``encoder_norm`` output one token;
    `intermediates` returns every token of every block, and
    ``pooling="none"`` gives the whole last sequence.

    Examples:
        >>> import numpy as np
        >>> model = ViT.from_preset("vit_ti16", num_classes=10, image_size=32, patch_size=4)
        >>> model(np.zeros((2, 32, 32, 3))).shape
        (2, 10)

        ```python
        import numpy as np
        from keras_vit import ViT

        model = ViT.from_preset("vit_ti16", num_classes=10, image_size=32, patch_size=4, num_layers=2)
        images = np.zeros((2, 32, 32, 3), "float32")
        print(model(images).shape)                    # (2, 10)
        print(model.grid_size, model.num_prefix_tokens)   # (8, 8) 1

        features = ViT(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                       mlp_dim=32, num_classes=0, pooling="gap")
        print(features(images).shape)                 # (2, 16)

        record = model.intermediates(images)
        print(record["attention_1"].shape)            # (2, 3, 65, 65)
        ```
    """

    def __init__(
        self,
        image_size=224,
        patch_size=16,
        num_layers=12,
        num_heads=12,
        hidden_dim=768,
        mlp_dim=3072,
        num_classes=1000,
        pooling="token",
        representation_size=None,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        drop_path_rate=0.0,
        layer_norm_epsilon=1e-6,
        gelu_approximate=True,
        qkv_bias=True,
        layer_scale_init=None,
        num_registers=0,
        position_embedding="learned",
        resnet_block_units=None,
        resnet_width_factor=1,
        head_bias_init=0.0,
        num_channels=3,
        class_names=None,
        data_format=None,
        dtype=None,
        **kwargs,
    ):
        image_size = pair(image_size, "image_size")
        patch_size = pair(patch_size, "patch_size")
        data_format = standardize_data_format(data_format)
        _check_ranges(
            num_layers=(num_layers, 1, int), num_heads=(num_heads, 1, int),
            hidden_dim=(hidden_dim, 1, int), mlp_dim=(mlp_dim, 1, int),
            num_classes=(num_classes, 0, int), num_registers=(num_registers, 0, int),
            num_channels=(num_channels, 1, int), representation_size=(representation_size or 1, 1, int),
            layer_norm_epsilon=(layer_norm_epsilon, 0, float),
        )
        for name, rate in (("dropout_rate", dropout_rate), ("attention_dropout_rate", attention_dropout_rate),
                           ("drop_path_rate", drop_path_rate)):
            if not 0 <= rate < 1:
                raise ValueError(f"`{name}` must be in [0, 1), got {rate!r}.")
        if pooling not in POOLINGS:
            raise ValueError(f"Unknown pooling {pooling!r}; use one of {POOLINGS}.")
        if class_names is not None:
            class_names = [str(name) for name in class_names]
            if len(class_names) != num_classes:
                raise ValueError(
                    f"{len(class_names)} class_names for {num_classes} classes; give one "
                    "name per class, or None."
                )
        if hidden_dim % num_heads:
            raise ValueError(
                f"hidden_dim {hidden_dim} is not divisible by num_heads {num_heads}."
            )
        if resnet_block_units is not None:
            resnet_block_units = tuple(int(n) for n in resnet_block_units)
        stride = 1 if resnet_block_units is None else resnet_stride(resnet_block_units)
        for size, patch, axis in zip(image_size, patch_size, ("height", "width")):
            if size % (patch * stride):
                raise ValueError(
                    f"image {axis} {size} is not divisible by the patch size "
                    f"{patch * stride}"
                    + (f" (patch {patch} x ResNet stride {stride})" if stride > 1 else "")
                    + f". Use an image size that is a multiple of {patch * stride}."
                )
        grid = tuple(size // (patch * stride) for size, patch in zip(image_size, patch_size))
        use_class_token = uses_class_token(pooling, position_embedding)
        num_prefix = int(use_class_token) + int(num_registers)

        built = {}

        def add(layer):
            built[layer.name] = layer

        if resnet_block_units is not None:
            add(vit_layers.ResNetStem(
                resnet_block_units, resnet_width_factor, data_format, dtype=dtype, name="resnet"
            ))
        add(vit_layers.PatchEmbedding(
            hidden_dim, patch_size, data_format, dtype=dtype, name="patch_embedding",
        ))
        if num_registers:
            add(vit_layers.ClassToken(num_registers, dtype=dtype, name="registers"))
        if use_class_token:
            add(vit_layers.ClassToken(1, dtype=dtype, name="class_token"))
        add(vit_layers.PositionEmbedding(
            grid, num_prefix, position_embedding, dtype=dtype, name="position_embedding"
        ))
        add(keras.layers.Dropout(dropout_rate, dtype=dtype, name="embedding_dropout"))
        for i, name in enumerate(_block_names(num_layers)):
            add(vit_layers.TransformerEncoder(
                num_heads, mlp_dim,
                dropout_rate=dropout_rate,
                attention_dropout_rate=attention_dropout_rate,
                drop_path_rate=drop_path_rate * i / max(num_layers - 1, 1),
                layer_norm_epsilon=layer_norm_epsilon,
                gelu_approximate=gelu_approximate,
                qkv_bias=qkv_bias,
                layer_scale_init=layer_scale_init,
                dtype=dtype,
                name=name,
            ))
        add(keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="encoder_norm"
        ))
        if pooling == "map":
            add(vit_layers.MultiHeadAttentionPooling(
                num_heads, mlp_dim, layer_norm_epsilon, gelu_approximate,
                dtype=dtype, name="pooling",
            ))
        elif pooling != "none":
            add(vit_layers.TokenPooling(pooling, num_prefix, dtype=dtype, name="pooling"))
        if representation_size:
            add(keras.layers.Dense(
                representation_size, activation="tanh", kernel_initializer="glorot_uniform",
                dtype=dtype, name="pre_logits",
            ))
        if num_classes:
            add(keras.layers.Dense(
                num_classes, kernel_initializer="zeros",
                bias_initializer=keras.initializers.Constant(head_bias_init),
                dtype=dtype, name="head",
            ))

        if data_format == "channels_last":
            input_shape = (*image_size, num_channels)
        else:
            input_shape = (num_channels, *image_size)
        inputs = keras.Input(shape=input_shape, name="images")
        outputs = _forward(_Layers(built.__getitem__, built, num_layers), inputs)
        kwargs.setdefault("name", "vit")
        super().__init__(inputs, outputs, dtype=dtype, **kwargs)

        self.image_size = image_size
        self.patch_size = patch_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.mlp_dim = mlp_dim
        self.num_classes = num_classes
        self.pooling = pooling
        self.representation_size = representation_size
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.drop_path_rate = drop_path_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.gelu_approximate = gelu_approximate
        self.qkv_bias = qkv_bias
        self.layer_scale_init = layer_scale_init
        self.num_registers = num_registers
        self.position_embedding = position_embedding
        self.resnet_block_units = resnet_block_units
        self.resnet_width_factor = resnet_width_factor
        self.head_bias_init = head_bias_init
        self.num_channels = num_channels
        self.class_names = class_names
        self.data_format = data_format
        self.grid_size = grid
        self.num_prefix_tokens = num_prefix
        # Functional models drop `dtype`: the layers' policy is the model's (this
        # is also what makes `compile` add loss scaling under mixed_float16).
        self.dtype_policy = built["encoder_norm"].dtype_policy
        self._expected_input_shape = input_shape

    # -- construction ---------------------------------------------------------

    @classmethod
    def from_preset(cls, name, pretrained=None, **overrides):
        """A preset architecture, freshly initialised or with released weights.

        Args:
            name: a preset (``"vit_b16"`` or ``"ViT-B/16"``, see
                :func:`keras_vit.presets`) or a released checkpoint
                (``"vit_b16.augreg_in21k_ft_in1k_224"``, see
                :func:`keras_vit.pretrained`).
            pretrained: True loads weights: the named checkpoint, or for a
                preset its recommended one
                (:func:`keras_vit.weights.pretrained.default_pretrained`),
                downloaded and cached on first use. False gives fresh weights.
                None (default): weights exactly when `name` is a checkpoint.
            **overrides: constructor arguments; with weights, those of
                :meth:`from_checkpoint` (``image_size``, ``num_classes``, ...).
        """
        from keras_vit.presets import preset_config
        from keras_vit.weights.pretrained import PRETRAINED
        from keras_vit.weights.pretrained import default_pretrained

        entry = PRETRAINED.get(str(name))
        if pretrained is None:
            pretrained = entry is not None
        if not pretrained:
            return cls(**{**preset_config(entry.architecture if entry else name), **overrides})
        entry = entry or default_pretrained(name)
        return cls.from_checkpoint(entry.name, **overrides)

    @classmethod
    def from_checkpoint(cls, path, image_size=None, num_classes=None,
                        resample_method="bilinear", **overrides):
        """Builds the model stored in a checkpoint and loads its weights.

        Reads the architecture from the file itself. Formats: vit_jax / AugReg
        ``.npz``, big_vision ``.npz``, a Hugging Face ViT directory
        (``config.json`` + ``model.safetensors``) and timm ViT
        ``.safetensors``. A different ``image_size`` resamples the position
        embeddings (Sec. 3.2); a different ``num_classes`` replaces the head
        with a zero-initialised one (0 removes it). `resample_method` is
        ``"bilinear"`` (vit_jax) or ``"bicubic"`` (timm). Other keyword
        arguments override the architecture (e.g. ``dropout_rate``,
        ``dtype``; ``num_heads`` for timm files, which do not store it).
        """
        from keras_vit.weights import load_checkpoint

        return load_checkpoint(cls, path, image_size, num_classes, resample_method, **overrides)

    def with_image_size(self, image_size, method="bilinear"):
        """A copy of this model for another resolution: same weights, the
        position embeddings 2-D interpolated to the new patch grid (Sec. 3.2).
        `method` is ``"bilinear"`` (vit_jax) or ``"bicubic"`` (timm)."""
        return self.with_config(image_size=image_size, method=method)

    def with_patch_size(self, patch_size, image_size=None, method="bilinear"):
        """A copy of this model for another patch size, without retraining.

        The patch-embedding kernel is PI-resized as in FlexiViT (Beyer et al.,
        "FlexiViT: One Model for All Patch Sizes", CVPR 2023; see
        :func:`keras_vit.layers.resize_patch_kernel`): for a larger patch,
        the new kernel on a bilinearly upsampled patch gives the old kernel's
        embedding of the patch. Learned position embeddings are interpolated
        to the new patch grid with `method` (``"bilinear"`` or ``"bicubic"``),
        every other weight is copied. `image_size` defaults to this model's.
        """
        from keras_vit.weights import transfer_weights

        if self.resnet_block_units is not None:
            raise ValueError(
                f"with_patch_size does not apply to the hybrid model {self.name}: "
                "its patch embedding runs on ResNet features, not on pixels, so "
                "resizing it is not FlexiViT. Use `with_image_size` to change the "
                "resolution of a hybrid model."
            )
        try:
            patch_size = pair(patch_size, "patch_size")
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"`patch_size` must be a positive int or a pair of positive ints, "
                f"got {patch_size!r}. Pass e.g. `with_patch_size(16)`."
            ) from error
        try:
            image_size = self.image_size if image_size is None else pair(image_size, "image_size")
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"`image_size` must be None (keep {self.image_size}), a positive "
                f"int or a pair of positive ints, got {image_size!r}."
            ) from error
        for size, patch, axis in zip(image_size, patch_size, ("height", "width")):
            if size % patch:
                raise ValueError(
                    f"`patch_size` {patch} does not divide the image {axis} {size}. "
                    f"Choose a patch size that divides {size}, or pass an "
                    f"`image_size` that is a multiple of {patch}."
                )
        model = type(self).from_config(
            {**self.get_config(), "patch_size": patch_size, "image_size": image_size}
        )
        transfer_weights(self, model, method=method, skip=("patch_embedding",))
        old = self.get_layer("patch_embedding").projection
        new = model.get_layer("patch_embedding").projection
        kernel = vit_layers.resize_patch_kernel(old.kernel, patch_size)
        new.kernel.assign(keras.ops.cast(kernel, new.kernel.dtype))
        new.bias.assign(old.bias)
        return model

    def with_config(self, skip=(), method="bilinear", **changes):
        """A copy of this model with some constructor arguments changed
        (`changes`) and the weights copied by name: learned position
        embeddings are 2-D interpolated to a new patch grid, and the layers
        named in `skip` (e.g. ``("head",)`` for a new number of classes) keep
        their fresh initial values."""
        from keras_vit.weights import transfer_weights

        model = type(self).from_config({**self.get_config(), **changes})
        transfer_weights(self, model, method=method, skip=skip)
        return model

    # -- use ------------------------------------------------------------------

    def __call__(self, inputs, *args, **kwargs):
        self._check_inputs(inputs)  # before Keras's own input checks
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None, mask=None, **kwargs):
        self._check_inputs(inputs)  # JAX's trainer calls `call` (stateless_call), not `__call__`
        return super().call(inputs, training=training, mask=mask, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        """Keras's ``fit``, with the images checked first (dtype, rank,
        channels, size) when ``x`` is an array or a ``tf.data.Dataset``."""
        self._check_data(x)
        return super().fit(x, *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        """Keras's ``evaluate``, with the images checked first as in `fit`."""
        self._check_data(x)
        return super().evaluate(x, *args, **kwargs)

    def predict(self, x, *args, **kwargs):
        """Keras's ``predict``, with the images checked first as in `fit`."""
        self._check_data(x)
        return super().predict(x, *args, **kwargs)

    def _check_data(self, x):
        """The images of an array or a ``tf.data.Dataset`` checked before
        Keras's loop starts: on JAX an error inside the first step would come
        after the trainer took the weights over."""
        spec = getattr(x, "element_spec", x)
        self._check_inputs(spec[0] if isinstance(spec, tuple) else spec)

    def _check_inputs(self, inputs):
        shape = getattr(inputs, "shape", None)
        if shape is None or getattr(shape, "rank", 0) is None:
            return
        dtype = keras.backend.standardize_dtype(getattr(inputs, "dtype", "float32"))
        if not dtype.startswith(("float", "bfloat")):
            raise ValueError(
                f"{self.name} expects float images scaled to [-1, 1], got {dtype} "
                f"images (shape {tuple(shape)}). Scale 0-255 pixels with "
                "`images / 127.5 - 1` (as the original code), or read files with "
                "`keras_vit.data.read_images`, which does it."
            )
        shape = tuple(shape)
        expected = self._expected_input_shape
        if len(shape) != 4:
            raise ValueError(
                f"{self.name} expects a batch of images of shape (batch, "
                f"{', '.join(map(str, expected))}) ({self.data_format}), got "
                f"shape {shape} (rank {len(shape)}). Add a batch axis for one image."
            )
        channel_axis = 3 if self.data_format == "channels_last" else 1
        if shape[channel_axis] is not None and shape[channel_axis] != self.num_channels:
            raise ValueError(
                f"{self.name} expects {self.num_channels} channels on axis "
                f"{channel_axis} ({self.data_format}), got shape {shape}. "
                "Convert the images (e.g. grayscale to RGB) or set "
                "`data_format` to match them."
            )
        spatial = shape[1:3] if self.data_format == "channels_last" else shape[2:4]
        if None not in spatial and tuple(spatial) != self.image_size:
            raise ValueError(
                f"{self.name} was built for {self.image_size[0]}x"
                f"{self.image_size[1]} images, got {spatial[0]}x{spatial[1]} "
                f"(shape {shape}). Resize the images, or make a model for this "
                f"size with `model.with_image_size({tuple(spatial)})`."
            )

    def intermediates(self, images, training=False):
        """Runs the model eagerly and returns every stage in a dict.

        Keys: ``"embeddings"`` (z_0, Eq. 1), ``"encoder_block_{i}"`` (z_l),
        ``"attention_{i}"`` (weights ``(batch, heads, tokens, tokens)``),
        ``"encoded"`` (LN(z_L)), ``"features"`` (y, after pooling and
        pre-logits) and ``"logits"`` when there is a head. The values equal
        those of ``model(images)``.
        """
        self._check_inputs(images)
        record = {}
        names = [layer.name for layer in self.layers]
        _forward(_Layers(self.get_layer, names, self.num_layers), images, training, record)
        return record

    # -- serialization --------------------------------------------------------

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "image_size": self.image_size,
            "patch_size": self.patch_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "mlp_dim": self.mlp_dim,
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "representation_size": self.representation_size,
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": self.drop_path_rate,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "gelu_approximate": self.gelu_approximate,
            "qkv_bias": self.qkv_bias,
            "layer_scale_init": self.layer_scale_init,
            "num_registers": self.num_registers,
            "position_embedding": self.position_embedding,
            "resnet_block_units": self.resnet_block_units,
            "resnet_width_factor": self.resnet_width_factor,
            "head_bias_init": self.head_bias_init,
            "num_channels": self.num_channels,
            "class_names": self.class_names,
            "data_format": self.data_format,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)
