"""Where keras_vit meets Keras's internals, in one place: `keras_private`
lists every private Keras name keras_vit reads or overrides (checked against
the installed Keras by tests/test_keras_private.py), and `multi_worker`
holds the narrow workarounds for Keras's TensorFlow trainer under
``MultiWorkerMirroredStrategy``."""
