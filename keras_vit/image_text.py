"""Two towers, an image `ViT` and a `TextTransformer`, embedded in one space:
CLIP (Radford et al., "Learning Transferable Visual Models From Natural
Language Supervision", ICML 2021) and SigLIP (Zhai et al., "Sigmoid Loss
for Language Image Pre-Training", ICCV 2023).

    u = normalize(image_tower(image))          (image_embeds)
    v = normalize(text_tower(token_ids))       (text_embeds)
    logits_per_image = exp(logit_scale) * u vᵀ  (+ logit_bias, SigLIP)

Read from Hugging Face ``CLIPModel``, ``SiglipModel`` and ``Siglip2Model``
(SigLIP 2's NaFlex towers: Tschannen et al., "SigLIP 2", arXiv:2502.14786,
2025) folders with their tokenizers (`ImageTextModel.from_checkpoint`); trained with `model.fit` on
``{"images", "token_ids"}`` batches and `keras_vit.training.losses`'
``CLIPLoss`` or ``SigLIPLoss``; turned into an ordinary classifier by
`keras_vit.zero_shot_classifier`.
"""

import math
import pathlib

import keras
import numpy as np
from keras import ops

from keras_vit import layers as vit_layers
from keras_vit import variants
from keras_vit.config import BLOCK_OPTIONS
from keras_vit.config import BlockOptions
from keras_vit.config import is_int
from keras_vit.config import is_number
from keras_vit.input_checks import symbolic
from keras_vit.model import ViT
from keras_vit.released import locate
from keras_vit.text_tokenizer import TextTokenizer
from keras_vit.weights import CheckpointError
from keras_vit.weights import assign_weights
from keras_vit.weights import build_model
from keras_vit.weights.huggingface import read_image_text


@keras.saving.register_keras_serializable(package="keras_vit")
class TextTransformer(keras.Model):
    """A text tower: token ids in, one embedding per text out.

    ``x_0 = E_token[ids] + E_pos``; pre-LN Transformer blocks (Eq. 2-3 of
    the ViT paper, `keras_vit.layers.TransformerEncoder`), with CLIP's causal
    mask or SigLIP's full attention; a final LayerNorm; one token pooled
    (`keras_vit.layers.TextPooling`: CLIP's end-of-text token, SigLIP's last
    position); a linear projection (CLIP's ``text_projection``, no bias;
    SigLIP's ``head``, with bias).

    Args:
        vocab_size: int. The token table's rows.
        context_length: int. The ids' length T (CLIP 77, SigLIP 64).
        hidden_dim: int. The width D.
        num_layers: int. Transformer blocks.
        num_heads: int. Attention heads.
        mlp_dim: int. The MLP's hidden size.
        projection_dim: int. The embedding's size; 0: no projection.
        projection_bias: bool. A bias on the projection (SigLIP).
        causal: bool. Each token attends to itself and those before (CLIP).
        pooling: ``"eos"``, ``"argmax"`` or ``"last"`` (`TextPooling`).
        eos_token_id: int. The end-of-text id, for ``pooling="eos"``.
        layer_norm_epsilon: float.
        mlp_activation: ``"gelu"`` or ``"quick_gelu"`` (OpenAI's CLIP).
        gelu_approximate: bool. tanh GELU (SigLIP's ``gelu_pytorch_tanh``).
        dtype: a dtype policy, or a ``DTypePolicyMap`` by layer path (as `ViT`'s).

    Each argument is checked as `keras_vit.ViT` checks its own: a wrong
    kind or value raises a `ValueError` naming it.

    Input shape: int ``(batch, context_length)``.
    Output shape: ``(batch, projection_dim)`` (``hidden_dim`` without a projection).

    Layers: ``embedding``, ``encoder_block_{i}``, ``final_norm``,
    ``pooling``, ``projection``.
    """

    def __init__(self, vocab_size, context_length=77, hidden_dim=512, num_layers=12, num_heads=8,
                 mlp_dim=2048, projection_dim=512, projection_bias=False, causal=True,
                 pooling="eos", eos_token_id=None, layer_norm_epsilon=1e-5,
                 mlp_activation="quick_gelu", gelu_approximate=False, dtype=None, **kwargs):
        for name, value, lowest in (("vocab_size", vocab_size, 1), ("context_length", context_length, 1),
                                    ("hidden_dim", hidden_dim, 1), ("num_layers", num_layers, 1),
                                    ("num_heads", num_heads, 1), ("mlp_dim", mlp_dim, 1),
                                    ("projection_dim", projection_dim, 0)):
            if not is_int(value, lowest):
                raise ValueError(f"TextTransformer's `{name}` must be an int >= {lowest}, got {value!r}.")
        for name, value in (("projection_bias", projection_bias), ("causal", causal),
                            ("gelu_approximate", gelu_approximate)):
            if not isinstance(value, bool):
                raise ValueError(f"TextTransformer's `{name}` must be True or False, got {value!r}.")
        if eos_token_id is not None and not (is_int(eos_token_id, 0) and eos_token_id < vocab_size):
            raise ValueError(f"TextTransformer's `eos_token_id` must be a token id, an int from 0 "
                             f"to vocab_size - 1 = {vocab_size - 1}, got {eos_token_id!r}. Give "
                             "the tokenizer's end-of-text id.")
        if not is_number(layer_norm_epsilon) or layer_norm_epsilon <= 0:
            raise ValueError(f"TextTransformer's `layer_norm_epsilon` must be a number > 0, got "
                             f"{layer_norm_epsilon!r}.")
        if mlp_activation not in ("gelu", "quick_gelu"):
            raise ValueError(f"TextTransformer's mlp_activation must be 'gelu' or 'quick_gelu', "
                             f"got {mlp_activation!r}.")
        self.text_config = dict(
            vocab_size=int(vocab_size), context_length=int(context_length),
            hidden_dim=int(hidden_dim), num_layers=int(num_layers), num_heads=int(num_heads),
            mlp_dim=int(mlp_dim), projection_dim=int(projection_dim),
            projection_bias=bool(projection_bias), causal=bool(causal), pooling=pooling,
            eos_token_id=None if eos_token_id is None else int(eos_token_id),
            layer_norm_epsilon=float(layer_norm_epsilon), mlp_activation=mlp_activation,
            gelu_approximate=bool(gelu_approximate))
        c = self.text_config
        dtype, policy_map = variants.split_policy_map(dtype)
        token_ids = keras.Input(shape=(c["context_length"],), dtype="int32", name="token_ids")
        x = vit_layers.TextEmbedding(c["vocab_size"], c["context_length"], c["hidden_dim"],
                                     dtype=dtype, name="embedding")(token_ids)
        options = BlockOptions.from_dict({name: c[name] for name in BLOCK_OPTIONS if name in c})
        for i in range(c["num_layers"]):
            x = vit_layers.TransformerEncoder(options, dtype=dtype, name=f"encoder_block_{i}")(x)
        x = vit_layers.LayerNormalization(epsilon=c["layer_norm_epsilon"], dtype=dtype,
                                          name="final_norm")(x)
        x = vit_layers.TextPooling(c["pooling"], c["eos_token_id"], dtype=dtype,
                                   name="pooling")(x, token_ids)
        if c["projection_dim"]:
            x = keras.layers.Dense(c["projection_dim"], use_bias=c["projection_bias"], dtype=dtype,
                                   name="projection")(x)
        kwargs.setdefault("name", "text_transformer")
        super().__init__(token_ids, x, dtype=dtype, **kwargs)
        self.dtype_policy = self.get_layer("embedding").dtype_policy
        variants.apply_policy_map(self, policy_map)
        self.context_length = c["context_length"]

    def compute_output_spec(self, token_ids, training=None, mask=None):
        """The output's ``KerasTensor`` for ids given as arrays, tensors or
        ``KerasTensor``s (`keras_vit.input_checks.symbolic`)."""
        return super().compute_output_spec(symbolic(token_ids), training, mask)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "dtype": variants.dtype_policy_config(self), **self.text_config}

    @classmethod
    def from_config(cls, config):
        return cls(**variants.with_policy(config))


def _values_now(x):
    """`x`'s values as a NumPy array where they are known as the code runs
    (a NumPy array, an eager tensor); None for a symbolic or traced tensor
    (`keras.Input`, inside ``tf.function``, ``jax.jit`` or
    ``torch.compile``), whose values come later."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, keras.KerasTensor):
        return None
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        known = not tf.is_symbolic_tensor(x)
    elif backend == "jax":
        import jax

        known = not isinstance(x, jax.core.Tracer)
    else:
        import torch

        known = not torch.compiler.is_compiling()
    return ops.convert_to_numpy(x) if known else None


def _check_tokenizer(tokenizer, text_model):
    """Raises an error unless `tokenizer` is None or a `TextTokenizer`
    making ids of `text_model`'s length."""
    if tokenizer is None:
        return
    if not isinstance(tokenizer, TextTokenizer):
        raise TypeError(f"ImageTextModel's tokenizer must be a keras_vit.TextTokenizer or None, "
                        f"got {type(tokenizer).__name__}. Make one with "
                        "TextTokenizer.from_directory(folder, context_length).")
    if tokenizer.context_length != text_model.context_length:
        raise ValueError(f"The tokenizer makes ids of length {tokenizer.context_length}, and the "
                         f"text tower reads {text_model.context_length}. Make the tokenizer with "
                         f"context_length={text_model.context_length}.")


@keras.saving.register_keras_serializable(package="keras_vit")
class ImageTextModel(keras.Model):
    """An image tower and a text tower in one embedding space (CLIP, SigLIP).

    Args:
        image_model: a `keras_vit.ViT` without a classifier head
            (``num_classes=0``), giving the image embedding: CLIP's with its
            projection (``projection_dim``), SigLIP's MAP-pooled features.
        text_model: a `TextTransformer` of the same embedding size.
        logit_scale: float. The initial log of the logits' scale (CLIP
            ``log(1 / 0.07)``, SigLIP ``log(10)``).
        logit_bias: float or None. The initial bias of the logits (SigLIP
            -10); None: no bias (CLIP).
        tokenizer: a `keras_vit.TextTokenizer` or None (`tokenize`), making
            ids of the text tower's ``context_length``.

    Call: ``{"images": (B, H, W, C), "token_ids": (B', T)}`` (a NaFlex
    image tower, ``naflex=True``: ``"images"`` is `keras_vit.naflex_inputs`'
    dict of ``"patches"``, ``"patch_mask"`` and ``"spatial_shapes"``) ->
    ``logits_per_image`` ``(B, B')``, the batch's image-text logits that
    `keras_vit.training.losses.CLIPLoss` and ``SigLIPLoss`` read. `fit` on
    such batches without labels pairs image ``i`` with text ``i``
    (`compute_loss`).

    The arguments of the constructor and of each method are checked first,
    as `keras_vit.ViT` checks its own: an error names what was given, what
    is expected and what to do.

    Example:
        A two-tower model built here (read one with `from_checkpoint`: a
        ``CLIPModel`` or ``SiglipModel`` folder with its tokenizer):

        ```python
        import numpy as np
        from keras_vit import ImageTextModel, TextTransformer, ViT, zero_shot_classifier
        from keras_vit.data.captions import caption_tokenizer

        tokenizer = caption_tokenizer(context_length=8)    # a word-level tokenizer of toy captions
        image_tower = ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16,
                          mlp_dim=32, num_classes=0, projection_dim=8)
        text_tower = TextTransformer(vocab_size=tokenizer.vocab_size, context_length=8,
                                     hidden_dim=16, num_layers=1, num_heads=2, mlp_dim=32,
                                     projection_dim=8, pooling="eos", eos_token_id=2)
        model = ImageTextModel(image_tower, text_tower, tokenizer=tokenizer)
        ids = model.tokenize(["the digit seven.", "a handwritten two."])
        print(ids)
        # -> [[ 1 23  7 20  4  2  0  0]
        # ->  [ 1  5 13 25  4  2  0  0]]
        images = np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")
        print(tuple(model.similarity(images, ids).shape))   # -> (3, 2)
        classifier = zero_shot_classifier(model, ["seven", "two"], templates=["the digit {}."])
        print(type(classifier).__name__, classifier.class_names)   # -> ViT ['seven', 'two']
        ```
    """

    def __init__(self, image_model, text_model, logit_scale=math.log(1 / 0.07), logit_bias=None,
                 tokenizer=None, **kwargs):
        if not isinstance(image_model, ViT):
            raise TypeError("ImageTextModel's image_model must be a keras_vit.ViT without a head "
                            f"(num_classes=0), got {type(image_model).__name__}.")
        if image_model.num_classes:
            raise ValueError("ImageTextModel's image_model must be a keras_vit.ViT without a "
                             f"head (num_classes=0), got {image_model!r}. Make one with "
                             "`vit.with_config(num_classes=0)`.")
        if image_model.pooling == "none":
            raise ValueError("ImageTextModel's image_model gives the token sequence "
                             "(pooling='none'); an image embedding is one vector per image. Use "
                             "pooling 'token', 'gap' or 'map'.")
        if not isinstance(text_model, TextTransformer):
            raise TypeError(f"ImageTextModel's text_model must be a keras_vit.TextTransformer, "
                            f"got {type(text_model).__name__}.")
        image_dim, text_dim = image_model.output.shape[-1], text_model.output.shape[-1]
        if image_dim != text_dim:
            raise ValueError(f"The towers embed in different sizes: images in {image_dim}, texts "
                             f"in {text_dim}. Give the image tower projection_dim={text_dim} or "
                             f"the text tower projection_dim={image_dim}.")
        if not (is_number(logit_scale) and math.isfinite(logit_scale)):
            raise ValueError(f"ImageTextModel's logit_scale (the log of the logits' scale) must be "
                             f"a finite number, got {logit_scale!r}.")
        if logit_bias is not None and not (is_number(logit_bias) and math.isfinite(logit_bias)):
            raise ValueError(f"ImageTextModel's logit_bias must be a finite number or None (no "
                             f"bias, CLIP), got {logit_bias!r}.")
        _check_tokenizer(tokenizer, text_model)
        kwargs.setdefault("name", "image_text_model")
        super().__init__(**kwargs)
        self.image_model = image_model
        self.text_model = text_model
        self.tokenizer = tokenizer
        self.logit_scale_init = float(logit_scale)
        self.logit_bias_init = None if logit_bias is None else float(logit_bias)
        self.logit_scale = self.add_weight(
            shape=(), initializer=keras.initializers.Constant(self.logit_scale_init),
            name="logit_scale")
        self.logit_bias = None if logit_bias is None else self.add_weight(
            shape=(), initializer=keras.initializers.Constant(self.logit_bias_init),
            name="logit_bias")
        self.built = True  # the towers are built, and the two scalars made here

    # -- the embeddings --------------------------------------------------------

    def tokenize(self, texts):
        """`texts` (a string or a non-empty list of them) as int32 token ids
        ``(texts, context_length)``, as the source's processor makes them
        (`keras_vit.TextTokenizer`, which checks them)."""
        if self.tokenizer is None:
            raise ValueError(
                "This model has no tokenizer. Read the model from a folder with its tokenizer "
                "files, or set one: `model.tokenizer = keras_vit.TextTokenizer(files, "
                f"context_length={self.text_model.context_length})`.")
        return self.tokenizer(texts)

    def encode_images(self, images, training=False):
        """``image_embeds``: the image tower's output, L2-normalised, ``(B, E)``;
        the image tower checks the images (`keras_vit.ViT`)."""
        return ops.normalize(ops.cast(self.image_model(images, training=training), "float32"),
                             axis=-1, epsilon=1e-12)

    def encode_text(self, token_ids, training=False):
        """``text_embeds``: the text tower's output, L2-normalised, ``(B, E)``.
        `token_ids` must be integer ids ``(texts, context_length)``, each in
        ``[0, vocab_size)`` (checked where their values are known: arrays,
        eager tensors)."""
        token_ids = self._checked_token_ids(token_ids, values=True)
        return self._text_embeds(token_ids, training)

    def _text_embeds(self, token_ids, training):
        return ops.normalize(ops.cast(self.text_model(token_ids, training=training), "float32"),
                             axis=-1, epsilon=1e-12)

    def _checked_token_ids(self, token_ids, values=False):
        """`token_ids` (an array, a tensor, or nested lists of ints) when
        they are integer ids of shape ``(texts, context_length)`` and, with
        `values`, each in ``[0, vocab_size)`` where their values are known
        (`_values_now`); anything else raises an error saying what to pass."""
        context, vocab = self.text_model.context_length, self.text_model.text_config["vocab_size"]
        make = "Make them with `model.tokenize(texts)`."
        if isinstance(token_ids, str) or (isinstance(token_ids, (list, tuple)) and any(
                isinstance(text, str) for text in token_ids)):
            raise TypeError(f"token_ids must be token ids, not texts; got {token_ids!r:.80}. "
                            "Tokenize the texts first: `model.encode_text(model.tokenize(texts))`.")
        if isinstance(token_ids, (list, tuple)):
            token_ids = np.asarray(token_ids)
        if not hasattr(token_ids, "shape") or not hasattr(token_ids, "dtype"):
            raise TypeError(f"token_ids must be an array of int ids (texts, {context}), got "
                            f"{type(token_ids).__name__} {token_ids!r:.80}. {make}")
        shape = tuple(token_ids.shape)
        if len(shape) != 2 or shape[1] not in (None, context):
            raise ValueError(f"token_ids must be (texts, {context}), got {shape}. {make}")
        dtype = keras.backend.standardize_dtype(token_ids.dtype)
        if "int" not in dtype:
            raise ValueError(f"token_ids must be integer ids, got {dtype} values (shape {shape}). "
                             f"{make}")
        known = _values_now(token_ids) if values else None
        if known is not None:
            outside = np.argwhere((known < 0) | (known >= vocab))
            if len(outside):
                row, position = outside[0]
                raise ValueError(
                    f"token_ids[{row}, {position}] is {known[row, position]}, outside the text "
                    f"tower's vocabulary: ids go from 0 to {vocab - 1} (vocab_size {vocab}), "
                    f"and {len(outside)} of the {known.size} are outside it. Make them with the "
                    "tower's own tokenizer (`model.tokenize(texts)`).")
        return token_ids

    def logits(self, image_embeds, text_embeds):
        """``exp(logit_scale) · image_embeds text_embedsᵀ (+ logit_bias)``: ``(B, B')``;
        the embeddings must be ``(batch, E)`` each, as `encode_images` and
        `encode_text` give them."""
        width = self.text_model.output.shape[-1]
        for name, embeds, make in (("image_embeds", image_embeds, "model.encode_images(images)"),
                                   ("text_embeds", text_embeds, "model.encode_text(token_ids)")):
            shape = getattr(embeds, "shape", None)
            if shape is None:
                raise TypeError(f"{name} must be an array of embeddings (batch, {width}), got "
                                f"{type(embeds).__name__}. Make them with {make}.")
            if len(shape) != 2 or shape[1] not in (None, width):
                raise ValueError(f"{name} must be embeddings of shape (batch, {width}), got shape "
                                 f"{tuple(shape)}. Make them with {make}.")
        logits = ops.matmul(image_embeds, ops.transpose(text_embeds)) * ops.exp(
            ops.cast(self.logit_scale, "float32"))
        if self.logit_bias is not None:
            logits = logits + ops.cast(self.logit_bias, "float32")
        return logits

    def similarity(self, images, token_ids):
        """``logits_per_image``: ``(images, texts)``, as the source computes them."""
        return self.logits(self.encode_images(images), self.encode_text(token_ids))

    def call(self, inputs, training=None):
        # the ids' shape and dtype checked; their values are traced here (fit, predict)
        token_ids = self._checked_token_ids(inputs["token_ids"])
        return self.logits(self.encode_images(inputs["images"], training),
                           self._text_embeds(token_ids, training))

    def compute_output_shape(self, input_shape):
        images = input_shape["images"]  # a NaFlex tower's: the dict of patches, mask and grids
        return ((images["patches"] if isinstance(images, dict) else images)[0],
                input_shape["token_ids"][0])

    def compute_output_spec(self, inputs, training=None):
        """The logits' ``KerasTensor`` for a dict of arrays, tensors or
        ``KerasTensor``s (`keras_vit.input_checks.symbolic`)."""
        return super().compute_output_spec(symbolic(inputs), training)

    # -- training --------------------------------------------------------------

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """Keras's ``compute_loss``; without labels (``fit`` on
        ``{"images", "token_ids"}`` alone) image ``i`` matches text ``i``:
        the labels are the identity, ``(B, B)``."""
        if y is None and y_pred is not None:
            y = ops.eye(ops.shape(y_pred)[0], ops.shape(y_pred)[1], dtype="float32")
        return super().compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                     training=training)

    def lock_image_tower(self, locked=True):
        """Locked-image tuning (LiT, Zhai et al., CVPR 2022): the image tower
        frozen, the text tower and the logit scale (and bias) trained. Call
        `compile` after it, as after any change of ``trainable``."""
        self.image_model.trainable = not locked

    # -- reading and saving ----------------------------------------------------

    @classmethod
    def from_checkpoint(cls, path, image_size=None, resample_method=None, **overrides):
        """A two-tower model from a Hugging Face ``CLIPModel``,
        ``SiglipModel`` or ``Siglip2Model`` folder (`read_image_text_model`),
        by path, URL or ``hf://``. Another `image_size` resamples the image tower's position
        embeddings (`keras_vit.ViT.from_checkpoint`); `overrides` go to the
        image tower (``dtype``, ``dropout_rate``). `keras_vit.load_model`
        (``model_class=ImageTextModel``) loads through it, and takes a
        ``.keras`` file of one too."""
        return read_image_text_model(path, image_size, resample_method, **overrides)

    def save_assets(self, dir_path):
        """The tokenizer's files, into the ``.keras`` archive's assets."""
        if self.tokenizer is not None:
            self.tokenizer.save(dir_path)

    def load_assets(self, dir_path):
        """The tokenizer, from the ``.keras`` archive's assets."""
        files = {p.name: p.read_bytes() for p in pathlib.Path(dir_path).iterdir() if p.is_file()}
        if files:
            self.tokenizer = TextTokenizer(files, self.text_model.context_length)

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable,
                "image_model": keras.saving.serialize_keras_object(self.image_model),
                "text_model": keras.saving.serialize_keras_object(self.text_model),
                "logit_scale": self.logit_scale_init, "logit_bias": self.logit_bias_init}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for name in ("image_model", "text_model"):
            config[name] = keras.saving.deserialize_keras_object(config[name])
        return cls(**config)


def read_image_text_model(path, image_size=None, resample_method=None, **overrides):
    """The `ImageTextModel` of a Hugging Face ``CLIPModel`` or
    ``SiglipModel`` folder (SigLIP 2's fixed-resolution files too: they
    are ``siglip`` folders), or of a ``Siglip2Model`` folder (SigLIP 2
    NaFlex: its image tower a NaFlex `ViT`, `keras_vit.naflex_inputs`), by
    path or ``hf://``, with the tokenizer files beside the weights. Another `image_size` resamples the image
    tower's position embeddings (`keras_vit.ViT.from_checkpoint`);
    `overrides` go to the image tower (``dtype``, ``dropout_rate``)."""
    directory, _ = locate(path)
    directory = pathlib.Path(directory)
    if directory.name == "model.safetensors":
        directory = directory.parent
    if not (directory / "config.json").is_file():
        what = f"a {directory.suffix} file" if directory.is_file() else "a folder without config.json"
        raise CheckpointError(
            f"{path} is {what}, which holds an image tower at most; ImageTextModel reads a "
            "Hugging Face CLIPModel, SiglipModel or Siglip2Model folder (config.json, "
            "model.safetensors and the tokenizer files). Read an image tower with keras_vit.ViT.from_checkpoint.")
    checkpoint, text = read_image_text(directory)  # a one-tower folder refused by name
    config, state = checkpoint.config, checkpoint.state
    if config.get("num_classes"):  # CLIP's visual_projection: the tower's projection
        config["projection_dim"], config["num_classes"] = config.pop("num_classes"), 0
        state["projection/kernel"] = state.pop("head/kernel")
        state.pop("head/bias")
    image_model = build_model(ViT, checkpoint, image_size, None, resample_method,
                              **overrides)
    dtype = overrides.get("dtype")
    text_model = TextTransformer(**text.config, dtype=dtype)
    assign_weights(text_model, text.state, text.source)
    try:
        tokenizer = TextTokenizer.from_directory(directory, text.config["context_length"])
    except ValueError as error:
        raise ValueError(f"{error} (ImageTextModel reads the tokenizer with the weights.)") from None
    return ImageTextModel(image_model, text_model, logit_scale=text.logit_scale,
                          logit_bias=text.logit_bias, tokenizer=tokenizer, name=text.name)
