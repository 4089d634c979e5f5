"""The optimizers of the ViT paper (Dosovitskiy et al., ICLR 2021).

- `finetune_optimizer`: fine-tuning as the released vit_jax code does it
  (Table 4): gradients averaged over ``accum_steps`` micro-batches, clipped at
  global norm 1, then optax's ``sgd(lr_fn, momentum=0.9)``, the learning rate
  outside the momentum trace (`MomentumSGD`).
- `pretrain_optimizer`: pre-training (Table 3): Adam (0.9, 0.999) with weight
  decay multiplied by the learning rate, as Flax's ``optim.Adam(weight_decay=)``
  used by the paper's code, and gradient clipping at global norm 1
  (`AdamWeightDecay`).

Both take vit_jax's learning-rate schedule (`keras_vit.training.schedules`)
and count it in optimizer updates, also under gradient accumulation.

Their update is written once in ``keras.ops`` (`keras_vit.kernels`'s
``adam_reference`` and ``momentum_reference``), which XLA fuses into one pass
per variable on JAX. On TensorFlow and PyTorch the same update runs in the
backend's fused training kernel (`keras_vit.kernels.optimizers`), to float32
rounding.
"""

import numbers

import keras

from keras_vit.config import is_int
from keras_vit.kernels import optimizers as fused
from keras_vit.training.schedules import learning_rate_schedule


class UpdateCountedOptimizer(keras.optimizers.Optimizer):
    """A Keras optimizer whose schedule and weight average count updates.

    Two corrections to Keras 3.15 for gradient accumulation
    (``gradient_accumulation_steps=k``, where ``self._iterations`` counts
    micro-batches and ``self.iterations`` updates):

    - The learning-rate schedule is called with the update count
      ``self.iterations``. Keras's ``BaseOptimizer._get_current_learning_rate``
      (keras/src/optimizers/base_optimizer.py) calls it with
      ``self._iterations``, the micro-batch count, although the argument's
      documentation says schedules see the update count. Every backend (the
      weight decay of TensorFlow's and PyTorch's optimizers included) reads
      the learning rate through this method.
    - The moving average of the weights (``use_ema=True``) is updated once per
      update, with ``ema_momentum`` per update: Polyak averaging of the
      weights after each update. Keras updates it after every micro-batch
      (``_backend_apply_gradients`` in base_optimizer.py and the JAX
      optimizer in keras/src/backend/jax/optimizer.py), which makes the momentum
      per update ``ema_momentum ** k``; ``ema_momentum ** (1 / k)`` does not
      repair it, as the ``k - 1`` micro-batches before each update average the
      previous weights in again. Between updates the average is now kept.

    A third, for the JAX backend: when ``fit`` ends it puts the averages into
    the model (``_overwrite_model_variables_with_average_value``) with
    ``var.assign(average)``, which makes both variables hold the same JAX
    array; the next jitted call that donates the model's state (e.g.
    ``predict_on_batch``) deletes it, and any later read fails with "Array has
    been deleted" (seen with Keras 3.15's own ``Adam(use_ema=True)``). The
    weights get a copy of the average instead.

    A fourth, for TensorFlow strategies with several replicas: Keras clips
    each replica's gradients (``_clip_gradients`` in
    ``BaseOptimizer._backend_apply_gradients``) before summing them over the
    replicas (``_all_reduce_sum_gradients`` in
    keras/src/backend/tensorflow/optimizer.py), so ``global_clipnorm`` sees
    each replica's norm, not that of the batch's gradient, and a mirrored
    run differs from the one-device run; with gradient accumulation that sum
    sits inside a ``cond``, where TensorFlow refuses a synchronisation
    ("`merge_call` called while defining a new graph"). The gradients are
    summed here first, on every micro-batch, outside the ``cond``.

    ``ema_overwrite_frequency`` is refused with accumulation: Keras tests it
    on every micro-batch, so it would overwrite the weights with the average
    on all ``k`` micro-batches of an update, also before the update is made.

    The private Keras names it overrides or reads are listed in
    `keras_vit.compat.keras_private`, which the tests check against the installed Keras.
    """

    def __init__(self, learning_rate, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        if self.gradient_accumulation_steps and self.use_ema and self.ema_overwrite_frequency:
            raise ValueError(
                "`ema_overwrite_frequency` is not supported with gradient accumulation "
                f"(got ema_overwrite_frequency={self.ema_overwrite_frequency}, "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps}): Keras "
                "would overwrite the weights on every micro-batch. Leave it None; "
                "`fit` puts the averaged weights into the model when it ends."
            )

    def _backend_apply_gradients(self, grads, trainable_variables):
        return super()._backend_apply_gradients(_sum_over_replicas(grads), trainable_variables)

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        if not fused.torch_kernel_applies(grads, trainable_variables):
            return super()._backend_update_step(grads, trainable_variables, learning_rate)
        import torch

        with torch.no_grad():
            self._torch_update_step(grads, trainable_variables, learning_rate)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return grads_and_vars  # TensorFlow: summed in _backend_apply_gradients, before clipping

    def _overwrite_model_variables_with_average_value(self, trainable_variables):
        for variable, average in zip(trainable_variables, self._model_variables_moving_average):
            if average is not None:
                variable.assign(keras.ops.copy(average))

    def _get_current_learning_rate(self):
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _update_model_variables_moving_average(self, trainable_variables):
        for variable, average in zip(trainable_variables, self._model_variables_moving_average):
            if average is None:
                continue
            # 0 at the first update (the average starts as the weights), then
            # ema_momentum; 1 (keep) on micro-batches that do not update.
            momentum = keras.ops.multiply(
                keras.ops.cast(keras.ops.not_equal(self.iterations, 0), variable.dtype),
                self.ema_momentum,
            )
            if self.gradient_accumulation_steps:
                is_update_step = keras.ops.equal(
                    (self._iterations + 1) % self.gradient_accumulation_steps, 0
                )
                momentum = keras.ops.where(is_update_step, momentum, 1.0)
            average.assign(momentum * average + (1.0 - momentum) * variable)


def _torch_tensors(optimizer, grads, variables, slots):
    """The variables' tensors, the gradients in their dtype, the tensors of
    each slot list (one optimizer variable per trained one), and a Python
    float rounded to their dtype (the ``keras.ops`` path's hyperparameters)."""
    import torch

    params = [v.value for v in variables]
    dtype = params[0].dtype
    grads = [g.to(dtype) for g in grads]
    slots = [[slot[optimizer._get_variable_index(v)].value for v in variables] for slot in slots]

    def rounded(x):
        return torch.tensor(x, dtype=dtype).item()

    return params, grads, slots, rounded


def _sum_over_replicas(grads):
    """TensorFlow, in a replica context of several replicas: the gradients
    summed over the replicas (the loss is already divided by their number,
    so this is the gradient of the global batch); else `grads`."""
    if keras.backend.backend() != "tensorflow":
        return grads
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return grads
    present = [g for g in grads if g is not None]
    summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, present) if present else [])
    return [None if g is None else next(summed) for g in grads]


@keras.saving.register_keras_serializable(package="keras_vit")
class MomentumSGD(UpdateCountedOptimizer):
    """SGD with momentum in optax's form, the learning rate outside the trace.

        trace = gradient + momentum * trace
        variable -= learning_rate_t * trace

    This is ``optax.sgd(learning_rate, momentum)`` as vit_jax fine-tunes with
    it. Keras's `SGD` keeps the learning rate inside its velocity
    (``v = momentum * v - learning_rate_t * gradient``), which gives other
    weights whenever the learning rate changes (warm-up, decay).

    Args:
        learning_rate: float, or a `LearningRateSchedule` (called with the
            update count).
        momentum: float in [0, 1]. Decay of the trace; 0.9 in the paper.
        **kwargs: Keras optimizer arguments (``global_clipnorm``,
            ``gradient_accumulation_steps``, ``use_ema``, ``ema_momentum``,
            ``weight_decay``, ``name``, ...).

    Variables: one float trace per trained variable, of its shape and dtype.
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real) \
                or not 0 <= momentum <= 1:
            raise ValueError(f"`momentum` must be a number in [0, 1], got {momentum!r}.")
        self.momentum = float(momentum)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.traces = self.add_optimizer_variables(variables, "trace")

    def update_step(self, gradient, variable, learning_rate):
        learning_rate = keras.ops.cast(learning_rate, variable.dtype)
        gradient = keras.ops.cast(gradient, variable.dtype)
        trace = self.traces[self._get_variable_index(variable)]
        momentum = keras.ops.cast(self.momentum, variable.dtype)
        if fused.tensorflow_kernel_applies(gradient, variable):
            fused.tensorflow_momentum(variable, trace, gradient, learning_rate, momentum)
        else:
            fused.momentum_reference(variable, trace, gradient, learning_rate, momentum, self.assign)

    def _torch_update_step(self, grads, variables, learning_rate):
        params, grads, (traces,), rounded = _torch_tensors(self, grads, variables, [self.traces])
        fused.torch_momentum(
            params, grads, traces, keras.ops.cast(learning_rate, "float32"), rounded(self.momentum)
        )

    def get_config(self):
        return {**super().get_config(), "momentum": self.momentum}


@keras.saving.register_keras_serializable(package="keras_vit")
class AdamWeightDecay(UpdateCountedOptimizer):
    """Adam with weight decay multiplied by the learning rate (Table 3).

    The update of Flax's ``optim.Adam(weight_decay=wd)``, used by the paper's
    pre-training code, at update ``t = 1, 2, ...``:

        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g**2
        w -= lr_t * (m / (1 - beta_1**t) / (sqrt(v / (1 - beta_2**t)) + epsilon) + wd * w)

    the decay taken on the weight before the update. Keras's `Adam` and
    `AdamW` put epsilon after a rescaled learning rate
    (``lr_t * sqrt(1 - beta_2**t) / (1 - beta_1**t)``), which differs.

    The decay is Keras's ``weight_decay`` (``w -= lr_t * wd * w`` before the
    Adam step, the same update) and applies to every variable, as in the
    paper's code; `exclude_from_weight_decay(var_names=["bias"])` before
    the first step leaves some out.

    Args:
        learning_rate: float, or a `LearningRateSchedule` (called with the
            update count).
        beta_1: float in [0, 1). Decay of the first moment.
        beta_2: float in [0, 1). Decay of the second moment.
        epsilon: float. Added to the root of the second moment; 1e-8 in Flax.
        weight_decay: float or None. The lr-multiplied decay; 0.1 on JFT,
            0.03 on ImageNet-21k, 0.3 on ImageNet in the paper.
        **kwargs: Keras optimizer arguments (``global_clipnorm``,
            ``gradient_accumulation_steps``, ``use_ema``, ``ema_momentum``,
            ``name``, ...).

    Variables: first and second moments per trained variable, of its shape and
    dtype.
    """

    def __init__(self, learning_rate=1e-3, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 weight_decay=None, **kwargs):
        super().__init__(learning_rate=learning_rate, weight_decay=weight_decay, **kwargs)
        for name, value in (("beta_1", beta_1), ("beta_2", beta_2)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not 0 <= value < 1:
                raise ValueError(f"`{name}` must be a number in [0, 1), got {value!r}.")
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.first_moments, self.second_moments = self.add_optimizer_variables(
            variables, ["first_moment", "second_moment"]
        )

    def update_step(self, gradient, variable, learning_rate):
        dtype = variable.dtype
        learning_rate = keras.ops.cast(learning_rate, dtype)
        gradient = keras.ops.cast(gradient, dtype)
        t = keras.ops.cast(self.iterations + 1, dtype)
        beta_1 = keras.ops.cast(self.beta_1, dtype)
        beta_2 = keras.ops.cast(self.beta_2, dtype)
        index = self._get_variable_index(variable)
        m, v = self.first_moments[index], self.second_moments[index]
        arguments = (variable, m, v, gradient, learning_rate, beta_1, beta_2, self.epsilon, t)
        if fused.tensorflow_kernel_applies(gradient, variable):
            fused.tensorflow_adam(*arguments)
        else:
            fused.adam_reference(*arguments, self.assign)

    def _torch_update_step(self, grads, variables, learning_rate):
        params, grads, (m, v), rounded = _torch_tensors(
            self, grads, variables, [self.first_moments, self.second_moments]
        )
        fused.torch_adam(
            params, grads, m, v, keras.ops.cast(learning_rate, "float32"),
            rounded(self.beta_1), rounded(self.beta_2), self.epsilon,
            keras.ops.cast(self.iterations + 1, "float32"),
        )

    def get_config(self):
        return {
            **super().get_config(),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
        }


_SET_BY_ARGUMENTS = {
    "learning_rate": "base_lr, total_steps, warmup_steps and decay_type",
    "global_clipnorm": "grad_norm_clip",
    "gradient_accumulation_steps": "accum_steps",
}


def _common_arguments(base_lr, total_steps, warmup_steps, decay_type, grad_norm_clip,
                      accum_steps, kwargs):
    """The schedule, clipping and accumulation arguments of both optimizers."""
    for key, argument in _SET_BY_ARGUMENTS.items():
        if key in kwargs:
            raise ValueError(f"Got `{key}`, which this function sets itself; use `{argument}`.")
    if not is_int(accum_steps, 1):
        raise ValueError(
            f"`accum_steps` must be an int >= 1 (1 for no accumulation), got {accum_steps!r}."
        )
    return dict(
        learning_rate=learning_rate_schedule(base_lr, total_steps, warmup_steps, decay_type),
        global_clipnorm=grad_norm_clip,
        gradient_accumulation_steps=int(accum_steps) if accum_steps > 1 else None,
        **kwargs,
    )


def finetune_optimizer(base_lr, total_steps, warmup_steps=500, decay_type="cosine",
                       momentum=0.9, grad_norm_clip=1.0, accum_steps=1, **kwargs):
    """The fine-tuning optimizer of the paper (Table 4) as vit_jax runs it.

    Per update: the gradients of ``accum_steps`` micro-batches are averaged,
    clipped to global norm ``grad_norm_clip``, then

        trace = g + momentum * trace
        w -= lr_t * trace

    with ``lr_t = learning_rate_schedule(base_lr, total_steps, warmup_steps,
    decay_type)(t)`` at update ``t = 0, 1, ...`` (so 0 at the first update).
    This is vit_jax's ``optax.chain(optax.clip_by_global_norm(1.0),
    optax.sgd(lr_fn, momentum=0.9))`` after ``accumulate_gradient``.

    With ``model.fit``, the batch of the data set is the micro-batch: a
    batch of 512 in 8 micro-batches is ``batch_size=64, accum_steps=8``, and
    ``total_steps`` counts updates (``fit`` runs ``accum_steps`` times as many
    batches).

    Args:
        base_lr: float. Peak learning rate; the paper's grid is {0.001, 0.003,
            0.01, 0.03} (ImageNet: {0.003, 0.01, 0.03, 0.06}).
        total_steps: int. Updates of the run (ImageNet 20,000; CIFAR 10,000;
            Pets and Flowers 500; VTAB 2,500).
        warmup_steps: int. Linear warm-up updates; 500 in vit_jax.
        decay_type: ``"cosine"`` (the paper) or ``"linear"``.
        momentum: float. 0.9.
        grad_norm_clip: float or None. Global-norm clipping; None for none.
        accum_steps: int >= 1. Micro-batches per update.
        **kwargs: passed to `MomentumSGD` (and so to `keras.optimizers.
            Optimizer`). Polyak averaging of the weights, as the paper's
            highest-resolution fine-tuning: ``use_ema=True,
            ema_momentum=0.9999``; the average is taken once per update (also
            with ``accum_steps > 1``) and ``fit`` puts it into the model when
            it ends.

    Returns:
        A `MomentumSGD`.

    Examples:
        ```python
        from keras_vit.training import finetune_optimizer

        optimizer = finetune_optimizer(0.03, total_steps=10_000, accum_steps=8,
                                       use_ema=True, ema_momentum=0.9999)
        print(type(optimizer).__name__, optimizer.momentum, optimizer.global_clipnorm,
              optimizer.gradient_accumulation_steps)
        # -> MomentumSGD 0.9 1.0 8
        ```
    """
    return MomentumSGD(
        momentum=momentum,
        **_common_arguments(base_lr, total_steps, warmup_steps, decay_type, grad_norm_clip,
                            accum_steps, kwargs),
    )


def pretrain_optimizer(base_lr, total_steps, warmup_steps=10_000, decay_type="linear",
                       weight_decay=0.1, beta_1=0.9, beta_2=0.999, grad_norm_clip=1.0,
                       accum_steps=1, **kwargs):
    """The pre-training optimizer of the paper (Table 3).

    Per update: the gradients of ``accum_steps`` micro-batches are averaged,
    clipped to global norm ``grad_norm_clip``, then Adam with lr-multiplied
    weight decay (`AdamWeightDecay`, epsilon 1e-8):

        w -= lr_t * (m_hat / (sqrt(v_hat) + 1e-8) + weight_decay * w)

    with ``lr_t = learning_rate_schedule(base_lr, total_steps, warmup_steps,
    decay_type)(t)`` at update ``t = 0, 1, ...``; linear decay ends at 1e-5.

    Args:
        base_lr: float. Peak learning rate (Table 3: 1e-3 on ImageNet-21k,
            8e-4 for B on JFT, 3e-3 on ImageNet).
        total_steps: int. Updates of the run.
        warmup_steps: int. Linear warm-up updates; 10k in the paper.
        decay_type: ``"linear"`` (JFT, ImageNet-21k) or ``"cosine"``
            (ImageNet).
        weight_decay: float. 0.1 (JFT), 0.03 (ImageNet-21k), 0.3 (ImageNet).
        beta_1: float. 0.9.
        beta_2: float. 0.999.
        grad_norm_clip: float or None. Global-norm clipping; None for none.
        accum_steps: int >= 1. Micro-batches per update.
        **kwargs: passed to `AdamWeightDecay` (and so to `keras.optimizers.
            Optimizer`), e.g. ``epsilon``, or ``use_ema=True,
            ema_momentum=0.9999`` for Polyak averaging of the weights, taken
            once per update.

    Returns:
        An `AdamWeightDecay`.

    Examples:
        ```python
        import keras
        import numpy as np
        from keras_vit import ViT
        from keras_vit.training import pretrain_optimizer, softmax_cross_entropy

        model = ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                    num_classes=3)
        optimizer = pretrain_optimizer(1e-3, total_steps=4, warmup_steps=1, weight_decay=0.1, accum_steps=2)
        model.compile(optimizer=optimizer, loss=softmax_cross_entropy())
        images = np.random.default_rng(0).uniform(-1, 1, (16, 16, 16, 3)).astype("float32")
        labels = keras.ops.one_hot(np.arange(16) % 3, 3)
        model.fit(images, labels, batch_size=4, epochs=1, verbose=0)   # 4 micro-batches: 2 updates
        print(int(optimizer.iterations))                  # -> 2
        print(round(float(optimizer.learning_rate), 6))   # -> 0.00067  # the schedule at update 2
        ```
    """
    return AdamWeightDecay(
        beta_1=beta_1,
        beta_2=beta_2,
        weight_decay=weight_decay,
        **_common_arguments(base_lr, total_steps, warmup_steps, decay_type, grad_norm_clip,
                            accum_steps, kwargs),
    )
