"""Scale-out: one run on one device or many, on the engines that exist.

TensorFlow runs through `tf.distribute` (``tpu``: `TPUStrategy`,
``mirrored``: `MirroredStrategy` over the local devices, ``multi_worker``:
`MultiWorkerMirroredStrategy` from ``TF_CONFIG``); JAX through
`keras.distribution` (``data_parallel``: `DataParallel`, ``model_parallel``:
`ModelParallel` with `layout_map`), across hosts joined by
`jax.distributed`; PyTorch trains on one device.

Whatever the strategy, the global batch is the same: each data-parallel
replica gets ``global / replicas`` examples, and each input pipeline (one per
TensorFlow worker or JAX process) reads and decodes only its own part of the
data, its rows of every global batch (`keras_vit.data.input_pipeline(shard=...)`).
The run's data is read as ``data_shards`` parts shared out among the
pipelines, so the same seed, batch, learning rate, steps and `data_shards`
give the same run on one device or many.
"""

import contextlib
import dataclasses
import json
import os

import keras
import numpy as np

# Defined without Keras, for the recipes' flags (`keras_vit.training.configs`).
from keras_vit.arguments import ALL_STRATEGIES
from keras_vit.arguments import STRATEGIES
from keras_vit.arguments import DistributionError
from keras_vit.arguments import check_strategy

__all__ = ["ALL_STRATEGIES", "BATCH_AXIS", "DistributionError", "MODEL_AXIS", "STRATEGIES",
           "Topology", "check_strategy", "layout_map", "setup", "to_numpy"]

BATCH_AXIS, MODEL_AXIS = "batch", "model"


@dataclasses.dataclass
class Topology:
    """Where a run trains.

    Attributes:
        strategy: one of `ALL_STRATEGIES`.
        num_replicas: int. Data-parallel replicas; each gets ``global batch /
            num_replicas`` examples of every batch.
        num_shards: int. Input pipelines reading disjoint parts of the data,
            each its rows of every global batch (TensorFlow workers, or JAX
            processes holding different data).
        shard_index: int. This process's pipeline, in ``[0, num_shards)``.
        is_chief: bool. Whether this process writes the work directory.
        tf_strategy: the `tf.distribute.Strategy`, or None.
        distribution: the `keras.distribution.Distribution`, or None.
        mesh: JAX: the `keras.distribution.DeviceMesh`, or None.
    """

    strategy: str = "none"
    num_replicas: int = 1
    num_shards: int = 1
    shard_index: int = 0
    is_chief: bool = True
    tf_strategy: object = None
    distribution: object = None
    mesh: object = None

    def shard_model(self, model):
        """``model_parallel``: lays the model out over the mesh with
        `layout_map` (call before building it, with its config); nothing for
        other strategies."""
        if self.strategy == "model_parallel":
            self.distribution = keras.distribution.ModelParallel(
                layout_map=layout_map(model, self.mesh), batch_dim_name=BATCH_AXIS,
                auto_shard_dataset=False,
            )

    @contextlib.contextmanager
    def scope(self):
        """Model, optimizer and training are created and run inside this."""
        if self.tf_strategy is not None:
            with self.tf_strategy.scope():
                yield
        elif self.distribution is not None:
            with self.distribution.scope():
                yield
        else:
            yield

    def prepare(self, model):
        """Readies a compiled `model` for `fit` under this topology: under
        ``multi_worker``, the narrow workarounds of `keras_vit.compat.multi_worker`
        (each active only while Keras 3.15's error is still raised)."""
        if self.strategy == "multi_worker":
            from keras_vit.compat import multi_worker

            multi_worker.fix_symbolic_build(model)
            multi_worker.fix_scalar_reduction(self.tf_strategy)

    def check_batch(self, batch_size, what="--batch-size"):
        """Raises `DistributionError` unless `batch_size` splits evenly over
        the replicas (static shapes on every device)."""
        if batch_size % self.num_replicas:
            raise DistributionError(
                f"{what} {batch_size} does not split evenly over the {self.num_replicas} "
                f"data-parallel replicas of --strategy {self.strategy}: each replica needs the same "
                f"number of examples. Use a multiple of {self.num_replicas}."
            )

    def distribute_dataset(self, make_dataset, batch_size):
        """The training data for `model.fit`.

        Args:
            make_dataset: ``f(shard_index, num_shards)`` -> `tf.data.Dataset`
                of this pipeline's rows of each global batch of `batch_size`.
            batch_size: int. The global batch.
        """
        if self.tf_strategy is None:
            return make_dataset(self.shard_index, self.num_shards)
        import tensorflow as tf

        def pipeline(context):
            # One pipeline per worker: its rows of each global batch, cut into
            # the per-replica batches its local replicas take in turn.
            dataset = make_dataset(context.input_pipeline_id, context.num_input_pipelines)
            return dataset.rebatch(context.get_per_replica_batch_size(batch_size))

        options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
        return self.tf_strategy.distribute_datasets_from_function(pipeline, options)


def setup(strategy="none", *, tpu=None, coordinator=None, num_processes=None, process_id=None,
          model_axis=None, host_devices=None):
    """Sets up `strategy` on this process and returns its `Topology`.

    Args:
        strategy: one of `ALL_STRATEGIES` that the Keras backend offers
            (`STRATEGIES`).
        tpu: ``tpu``: the TPU's name or gRPC address for
            `TPUClusterResolver` (``"local"`` on a Cloud TPU VM); None reads
            the environment (``TPU_NAME``).
        coordinator: JAX, several hosts: ``HOST:PORT`` of process 0.
        num_processes: JAX, several hosts: how many processes join.
        process_id: JAX, several hosts: this process, in
            ``[0, num_processes)``.
        model_axis: ``model_parallel``: devices on the ``model`` axis of the
            mesh, over which attention heads and MLP units are split
            (default 2).
        host_devices: int or None. Split the host CPU into this many logical
            devices (to try a strategy on a machine without accelerators).
            Must come before the backend's first computation.
    """
    backend = keras.backend.backend()
    check_strategy(strategy, backend)
    # A setting the strategy does not use is refused, not ignored.
    for flag, value, wanted in (("--tpu", tpu, ("tpu",)), ("--model-axis", model_axis, ("model_parallel",)),
                                ("--host-devices", host_devices,
                                 tuple(s for s in ALL_STRATEGIES if s not in ("none", "tpu")))):
        if value is not None and strategy not in wanted:
            raise DistributionError(
                f"{flag} {value} is for --strategy {' or '.join(wanted)}; with --strategy {strategy} it "
                f"would do nothing. Drop it, or choose such a strategy."
            )
    multi_host = coordinator is not None or num_processes is not None or process_id is not None
    if multi_host and backend != "jax":
        raise DistributionError(
            "--coordinator, --num-processes and --process-id join JAX processes; on TensorFlow, "
            "workers of --strategy multi_worker read TF_CONFIG (see docs/distributed.md)."
        )
    if host_devices is not None:
        _split_host(backend, host_devices)
    if backend == "tensorflow":
        return _tensorflow(strategy, tpu)
    if backend == "jax":
        if multi_host:
            _join_jax_processes(coordinator, num_processes, process_id)
        elif strategy != "none" and _cluster_environment():
            keras.distribution.initialize()
        return _jax(strategy, 2 if model_axis is None else model_axis)
    return Topology()


def _split_host(backend, count):
    if not isinstance(count, int) or count < 1:
        raise DistributionError(f"--host-devices must be an int >= 1, got {count!r}.")
    try:
        if backend == "tensorflow":
            import tensorflow as tf

            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * count
            )
        elif backend == "jax":
            import jax

            jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError as error:
        raise DistributionError(
            f"--host-devices {count}: the {backend} runtime has already started ({error}); "
            "split the host before any computation."
        ) from error


# -- TensorFlow ---------------------------------------------------------------

def _tensorflow(strategy, tpu):
    import tensorflow as tf

    if strategy == "none":
        return Topology()
    if strategy == "tpu":
        return _tf_topology("tpu", _tpu_strategy(tpu))
    if strategy == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in gpus or tf.config.list_logical_devices("CPU")]
        return _tf_topology("mirrored", tf.distribute.MirroredStrategy(devices))
    cluster = _tf_config()
    return _tf_topology("multi_worker", tf.distribute.MultiWorkerMirroredStrategy(),
                        worker=cluster["task"]["index"], workers=len(cluster["cluster"]["worker"]))


def _tpu_strategy(tpu):
    """`TPUStrategy` on the TPU that `tpu` or the environment names."""
    import tensorflow as tf

    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        where = f"--tpu {tpu}" if tpu else "the environment (TPU_NAME, or a Cloud TPU VM)"
        raise DistributionError(
            f"--strategy tpu: no TPU found from {where}: {str(error).strip().splitlines()[0]} "
            "On a Cloud TPU VM pass --tpu local; for a TPU node pass --tpu NAME (or set TPU_NAME)."
        ) from error
    return tf.distribute.TPUStrategy(resolver)


def _tf_topology(name, strategy, worker=0, workers=1):
    # Everything after the strategy exists is shared by tpu, mirrored and
    # multi_worker: replicas, one input pipeline per worker, worker 0 the chief.
    return Topology(strategy=name, num_replicas=strategy.num_replicas_in_sync, num_shards=workers,
                    shard_index=worker, is_chief=worker == 0, tf_strategy=strategy)


def _tf_config():
    """The parsed ``TF_CONFIG``, or a `DistributionError` saying what is wrong."""
    example = ('{"cluster": {"worker": ["host0:12345", "host1:12345"]}, '
               '"task": {"type": "worker", "index": 0}}')
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise DistributionError(
            f"--strategy multi_worker reads the cluster from TF_CONFIG, which is not set. Set it on "
            f"every worker, e.g. TF_CONFIG='{example}' with this worker's index."
        )
    try:
        config = json.loads(text)
        workers = config["cluster"]["worker"]
        task = config["task"]
        valid = (
            isinstance(workers, list) and workers and all(isinstance(w, str) and ":" in w for w in workers)
            and task.get("type") == "worker" and isinstance(task.get("index"), int)
            and 0 <= task["index"] < len(workers) and not set(config["cluster"]) - {"worker"}
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        valid = False
    if not valid:
        raise DistributionError(
            f"TF_CONFIG is malformed: {text!r}. It must be JSON with a 'cluster' of 'worker' "
            f"HOST:PORT addresses and this process's 'task' (type 'worker', an index into that "
            f"list), e.g. '{example}'."
        )
    return config


# -- JAX ----------------------------------------------------------------------

def _cluster_environment():
    """Whether the environment describes several JAX processes (a multi-host
    Cloud TPU VM, SLURM, or Keras's own variables)."""
    hosts = os.environ.get("TPU_WORKER_HOSTNAMES", "")
    return (
        "," in hosts
        or int(os.environ.get("SLURM_NTASKS", "1")) > 1
        or bool(os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"))
        or bool(os.environ.get("JAX_COORDINATOR_ADDRESS"))
    )


def _join_jax_processes(coordinator, num_processes, process_id):
    if coordinator is None or num_processes is None or process_id is None:
        raise DistributionError(
            "Several JAX processes need all three of --coordinator HOST:PORT, --num-processes N "
            "and --process-id I (or none of them, on a Cloud TPU VM or cluster that sets the "
            "environment)."
        )
    host, _, port = str(coordinator).rpartition(":")
    if not host or not port.isdigit():
        raise DistributionError(f"--coordinator must be HOST:PORT of process 0, got {coordinator!r}.")
    if not isinstance(num_processes, int) or num_processes < 1:
        raise DistributionError(f"--num-processes must be an int >= 1, got {num_processes!r}.")
    if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
        raise DistributionError(
            f"--process-id {process_id} is out of range: with --num-processes {num_processes} it is "
            f"one of 0..{num_processes - 1}, a different one on each process (0 is the coordinator)."
        )
    import jax

    if jax.config.jax_platforms in (None, "", "cpu") and not jax.config.jax_cpu_collectives_implementation:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes talk over gloo
    keras.distribution.initialize(coordinator, num_processes, process_id)


def _jax(strategy, model_axis):
    import jax

    if strategy == "none":
        return Topology(is_chief=jax.process_index() == 0)
    devices = jax.devices()
    if strategy == "data_parallel":
        mesh = keras.distribution.DeviceMesh((len(devices),), [BATCH_AXIS], devices)
        distribution = keras.distribution.DataParallel(device_mesh=mesh, auto_shard_dataset=False)
    else:
        if not isinstance(model_axis, int) or model_axis < 1 or len(devices) % model_axis:
            raise DistributionError(
                f"--model-axis {model_axis} must divide the {len(devices)} devices into a "
                f"({BATCH_AXIS}, {MODEL_AXIS}) mesh."
            )
        mesh = keras.distribution.DeviceMesh(
            (len(devices) // model_axis, model_axis), [BATCH_AXIS, MODEL_AXIS], devices
        )
        distribution = None  # needs the model's sizes: Topology.shard_model
    replicas = mesh.shape[0]
    processes, process = jax.process_count(), jax.process_index()
    # As keras.distribution's data_shard_id: processes holding one replica
    # between them read the same rows.
    shards = min(processes, replicas)
    return Topology(strategy=strategy, num_replicas=replicas, num_shards=shards,
                    shard_index=process // (processes // shards), is_chief=process == 0,
                    distribution=distribution, mesh=mesh)


def layout_map(model, mesh):
    """How `model_parallel` shards a ViT (Megatron-style, as big_vision's
    and keras-hub's ViT layouts): the attention heads of the query, key,
    value and output projections and the MLP's hidden units (Eq. 2-3) over
    the mesh's ``model`` axis; everything else replicated; the batch over
    its ``batch`` axis.

    Args:
        model: a ViT or `MaskedPatchPredictor`, its `keras_vit.ViTConfig`,
            or a dict of its fields (``num_heads`` and ``mlp_dim`` are read).
        mesh: `keras.distribution.DeviceMesh` with a ``model`` axis (and a
            ``batch`` axis for the data).

    Returns:
        `keras.distribution.LayoutMap` keyed by variable-path patterns (which
        Keras matches against the whole path).
    """
    if MODEL_AXIS not in mesh.axis_names:
        raise DistributionError(
            f"layout_map needs a mesh with a {MODEL_AXIS!r} axis (and {BATCH_AXIS!r} for the data); "
            f"got axes {mesh.axis_names}."
        )
    config = model if isinstance(model, dict) else getattr(model, "config", model).to_dict()
    size = mesh.shape[mesh.axis_names.index(MODEL_AXIS)]
    for key in ("num_heads", "mlp_dim"):
        if config[key] % size:
            raise DistributionError(
                f"The model's {key} ({config[key]}) does not split over the {size} devices of the "
                f"{MODEL_AXIS!r} axis; choose a model axis that divides it."
            )
    m = MODEL_AXIS
    layouts = keras.distribution.LayoutMap(mesh)
    # (hidden, heads, head_dim) in, (heads, head_dim, hidden) out: Eq. 2's MSA.
    layouts[r".*attention/(query|key|value)/kernel"] = (None, m, None)
    layouts[r".*attention/(query|key|value)/bias"] = (m, None)
    layouts[r".*attention/out/kernel"] = (m, None, None)
    # (hidden, mlp) then (mlp, hidden): Eq. 3's MLP.
    layouts[r".*mlp/fc1/kernel"] = (None, m)
    layouts[r".*mlp/fc1/bias"] = (m,)
    layouts[r".*mlp/fc2/kernel"] = (m, None)
    return layouts


# -- reading sharded values ---------------------------------------------------

def to_numpy(value):
    """The full value of a variable or array as numpy, also when it is
    sharded over devices of several processes (then every process must
    call this, in the same order)."""
    value = getattr(value, "value", value)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if isinstance(value, tf.distribute.DistributedValues):
            # Mirrored: every replica holds the same value (numpy cannot
            # always read the container, e.g. the optimizer's step counter).
            value = value.values[0]
    if keras.backend.backend() == "jax":
        import jax

        if isinstance(value, jax.Array) and not value.is_fully_addressable:
            if value.is_fully_replicated:
                return np.asarray(value.addressable_data(0))
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(value, tiled=True))
    return keras.ops.convert_to_numpy(value)
