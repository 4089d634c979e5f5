"""Narrow workarounds for Keras 3.15's TensorFlow trainer under
`tf.distribute.MultiWorkerMirroredStrategy`, each used only while Keras
still fails: ours runs only after Keras's own code raised its known error.
The private names they use are listed in `keras_vit.compat.keras_private`.

1. ``TensorFlowTrainer._maybe_symbolic_build`` (keras/src/backend/tensorflow/
   trainer.py) takes a first batch to build the metrics and, when it is a
   ``PerReplica`` value, averages it over the replicas with
   ``strategy.reduce("MEAN", batch, axis=None)``; the collective reduce of
   ``MultiWorkerMirroredStrategy`` cannot convert a ``PerReplica`` to a
   tensor ("... with an unsupported type (<class '...PerReplica'>) to a
   Tensor"). Only the batch's shapes matter there: this replica's part is
   used instead.
2. ``reduce_per_replica`` (same file) reduces every metric with
   ``strategy.reduce("MEAN", v, axis=0)`` in multi-worker mode, which fails
   for the scalar loss and metrics (there is no axis 0). Scalars are
   averaged over the replicas (``axis=None``) instead.
"""

import functools
import types

import keras
import tensorflow as tf
from keras.src.backend.tensorflow import trainer as tf_trainer  # no public equivalent


def _local_part(value, strategy):
    if isinstance(value, tf.distribute.DistributedValues):
        return strategy.experimental_local_results(value)[0]
    return value


def _symbolic_build_from_local_batch(model, iterator=None, data_batch=None):
    strategy = model.distribute_strategy
    if iterator is not None:
        for _, _, it in iterator:
            data_batch = keras.tree.map_structure(lambda v: _local_part(v, strategy), next(it))
            break
    with strategy.scope():
        model._symbolic_build(data_batch=data_batch)


def _is_per_replica_conversion_error(error):
    return "PerReplica" in str(error) and "to a Tensor" in str(error)


def fix_symbolic_build(model):
    """Fix 1 for `model` (an instance, nothing global)."""
    original = model._maybe_symbolic_build

    @functools.wraps(original)
    def maybe_symbolic_build(self, iterator=None, data_batch=None):
        try:
            return original(iterator=iterator, data_batch=data_batch)
        except (TypeError, ValueError) as error:
            if not _is_per_replica_conversion_error(error):
                raise
        if iterator is not None:
            iterator.reset()
        _symbolic_build_from_local_batch(self, iterator, data_batch)

    model._maybe_symbolic_build = types.MethodType(maybe_symbolic_build, model)


_original_reduce_per_replica = tf_trainer.reduce_per_replica


def _reduce_per_replica(values, strategy, reduction):
    if not tf_trainer._collective_all_reduce_multi_worker(strategy):
        return _original_reduce_per_replica(values, strategy, reduction)
    return keras.tree.map_structure(
        lambda v: strategy.reduce("MEAN", v, axis=None) if v.shape.rank == 0
        else _original_reduce_per_replica(v, strategy, reduction),
        values,
    )


def fix_scalar_reduction(strategy):
    """Fix 2, installed in Keras's TensorFlow trainer module if a probe (a
    scalar reduced as the trainer reduces a metric, eagerly, on every worker
    alike) still fails. Returns whether it was installed."""
    if tf_trainer.reduce_per_replica is _reduce_per_replica:
        return True
    try:
        _original_reduce_per_replica(tf.constant(0.0), strategy, "auto")
        return False  # Keras reduces scalars now
    except (ValueError, tf.errors.InvalidArgumentError):
        tf_trainer.reduce_per_replica = _reduce_per_replica
        return True
