"""The switch that turns every fast path off (export), and the helper of
the kernels' written-out gradients."""

import contextlib
import threading

_state = threading.local()


@contextlib.contextmanager
def keras_layers_only():
    """Within it, every kernel is its ``keras.ops`` reference and every
    projection calls its Keras layer: the graph an exporter traces holds
    Keras's ops and nothing else. `ViT.export` runs inside it.

    Example:
        ```python
        import numpy as np
        from keras_vit import ViT, kernels

        model = ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2,
                    hidden_dim=8, mlp_dim=16, num_classes=3)
        with kernels.keras_layers_only():
            print(kernels.fast_paths_enabled())   # -> False
            logits = model(np.zeros((1, 16, 16, 3), "float32"))
        ```
    """
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def fast_paths_enabled():
    """False inside `keras_layers_only`."""
    return not getattr(_state, "depth", 0)


def upstream_gradient(args, upstream):
    """The incoming gradient of a ``keras.ops.custom_gradient`` function's ``grad``.

    Keras passes it as the keyword ``upstream`` on TensorFlow and positionally
    on JAX and PyTorch: ``def grad(*args, upstream=None)`` takes both.
    """
    return args[0] if upstream is None else upstream
