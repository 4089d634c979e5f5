"""The text tower's own layers (CLIP, Radford et al. 2021; SigLIP, Zhai et
al. 2023): token and position embeddings, and the pooling of one token."""

import keras
from keras import ops

TEXT_POOLINGS = ("eos", "argmax", "last")


@keras.saving.register_keras_serializable(package="keras_vit")
class TextEmbedding(keras.layers.Layer):
    """``x_t = E_token[id_t] + E_pos[t]``: a text tower's input embedding.

    Args:
        vocab_size: int. Rows of the token table.
        context_length: int. Rows of the position table (the longest text).
        hidden_dim: int. The embedding width D.

    Call: int ids ``(batch, T)``, T at most `context_length`.
    Output shape: ``(batch, T, D)``.

    Weights: ``token_embedding`` ``(vocab_size, D)``, normal(0.02), and
    ``position_embedding`` ``(context_length, D)``, normal(0.01) (CLIP's
    initialisation).
    """

    def __init__(self, vocab_size, context_length, hidden_dim, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.context_length = int(context_length)
        self.hidden_dim = int(hidden_dim)

    def build(self, input_shape):
        self.token_embedding = self.add_weight(
            shape=(self.vocab_size, self.hidden_dim), name="token_embedding",
            initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.position_embedding = self.add_weight(
            shape=(self.context_length, self.hidden_dim), name="position_embedding",
            initializer=keras.initializers.RandomNormal(stddev=0.01))

    def call(self, token_ids):
        tokens = ops.take(self.token_embedding, ops.cast(token_ids, "int32"), axis=0)
        positions = self.position_embedding[: ops.shape(token_ids)[1]]
        return ops.cast(tokens + positions[None], self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.hidden_dim)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, context_length=self.context_length,
                      hidden_dim=self.hidden_dim)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class TextPooling(keras.layers.Layer):
    """One token's features per text: the text's embedding.

    Args:
        mode: ``"eos"``: the first position holding `eos_token_id` (CLIP;
            the padding may be the same token); ``"argmax"``: the first
            position of the largest id (OpenAI's CLIP, whose end-of-text id
            is the largest: transformers' rule for ``eos_token_id == 2``);
            ``"last"``: the last position (SigLIP).
        eos_token_id: int, for ``"eos"``.

    Call: ``(tokens, token_ids)``, ``(batch, T, D)`` and ``(batch, T)``.
    Output shape: ``(batch, D)``.
    """

    def __init__(self, mode="eos", eos_token_id=None, **kwargs):
        super().__init__(**kwargs)
        if mode not in TEXT_POOLINGS:
            raise ValueError(f"Unknown text pooling {mode!r}; use one of {TEXT_POOLINGS}.")
        if mode == "eos" and eos_token_id is None:
            raise ValueError("pooling='eos' reads the end-of-text token: give its eos_token_id.")
        self.mode = mode
        self.eos_token_id = None if eos_token_id is None else int(eos_token_id)

    def build(self, tokens_shape, token_ids_shape=None):
        """No weights; the shapes are named after `call`'s arguments, as
        Keras's layers of several inputs name them."""

    def call(self, tokens, token_ids):
        if self.mode == "last":
            return tokens[:, -1]
        token_ids = ops.cast(token_ids, "int32")
        length = ops.shape(token_ids)[1]
        target = (ops.max(token_ids, axis=1, keepdims=True) if self.mode == "argmax"
                  else self.eos_token_id)
        positions = ops.arange(length, dtype="int32")[None]
        first = ops.min(ops.where(ops.equal(token_ids, target), positions, length), axis=1)
        # a text without the token reads its last position (never out of range)
        pick = ops.one_hot(ops.minimum(first, length - 1), length, dtype=tokens.dtype)
        return ops.einsum("bt,btd->bd", pick, tokens)

    def compute_output_shape(self, tokens_shape, token_ids_shape=None):
        return (tokens_shape[0], tokens_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode, eos_token_id=self.eos_token_id)
        return config
