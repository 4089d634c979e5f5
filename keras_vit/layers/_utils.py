"""Small helpers shared by the layers."""

import keras


def pair(value, name):
    """Returns `value` as a tuple of two positive ints (an int gives (v, v))."""
    if isinstance(value, int):
        value = (value, value)
    value = tuple(value)
    if len(value) != 2 or not all(isinstance(v, int) and v > 0 for v in value):
        raise ValueError(
            f"`{name}` must be a positive int or a pair of positive ints, "
            f"got {value!r}."
        )
    return value


def standardize_data_format(value):
    """`value`, or Keras's image data format when None, checked."""
    value = value or keras.config.image_data_format()
    if value not in ("channels_last", "channels_first"):
        raise ValueError(
            f"`data_format` must be 'channels_last' or 'channels_first', got {value!r}."
        )
    return value


def upstream_gradient(args, upstream):
    """The incoming gradient of a ``keras.ops.custom_gradient`` function's ``grad``.

    Keras passes it as the keyword ``upstream`` on TensorFlow and positionally
    on JAX and PyTorch: ``def grad(*args, upstream=None)`` takes both.
    """
    return args[0] if upstream is None else upstream


def backend_platform():
    """``(backend, platform)``: the platform ``"cpu"``, ``"gpu"``, ... of JAX and
    TensorFlow; None for PyTorch, whose tensors carry their own device.

    The layers' measured branches (docs/performance.md) are chosen by it.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return backend, jax.default_backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return backend, "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    return backend, None
