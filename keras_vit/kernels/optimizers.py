"""The optimizers' updates in the backends' fused training kernels, each
beside the ``keras.ops`` update it reproduces to float32 rounding.

`keras_vit.training.optimizers` writes every update once in ``keras.ops``
(XLA fuses it into one pass per variable on JAX). On TensorFlow and PyTorch,
where each op is a pass over memory, the same update runs here:

- TensorFlow, outside a distribution strategy: ``tf.raw_ops.ResourceApplyAdam``
  and ``ResourceApplyMomentum``, one kernel per variable.
- PyTorch: the functional ``torch.optim.adam.adam`` and ``torch.optim.sgd.sgd``
  with ``fused=True``, one call for all variables.

docs/performance.md has what they gain.
"""

from keras import ops

from keras_vit.kernels.routes import route


def tensorflow_kernel_applies(gradient, variable):
    """Whether `routes.route` sends this update to TensorFlow's kernels:
    TensorFlow, outside a distribution strategy (whose variables update per
    replica), a dense gradient of a resource variable."""
    return route("optimizer", gradients=[gradient], variables=[variable]) == "resource_apply"


def torch_kernel_applies(grads, variables):
    """Whether `routes.route` sends these updates to PyTorch's fused kernel:
    dense gradients, all variables of one device and dtype."""
    return route("optimizer", gradients=grads, variables=variables) == "fused"


def adam_reference(variable, m, v, gradient, learning_rate, beta_1, beta_2, epsilon, t, assign):
    """Flax's Adam step at update ``t`` in ``keras.ops``; `assign(target,
    value)` writes (the optimizer's ``assign``)::

        m = beta_1 m + (1 - beta_1) g;  v = beta_2 v + (1 - beta_2) g²
        w -= lr (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)
    """
    assign(m, beta_1 * m + (1.0 - beta_1) * gradient)
    assign(v, beta_2 * v + (1.0 - beta_2) * ops.square(gradient))
    m_hat = m / (1.0 - ops.power(beta_1, t))
    v_hat = v / (1.0 - ops.power(beta_2, t))
    assign(variable, variable - learning_rate * m_hat / (ops.sqrt(v_hat) + epsilon))


def tensorflow_adam(variable, m, v, gradient, learning_rate, beta_1, beta_2, epsilon, t):
    """`adam_reference` as TensorFlow's ``ResourceApplyAdam`` kernel."""
    import tensorflow as tf

    # The kernel's step, lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps'),
    # is the reference's with eps' = eps sqrt(1 - b2^t).
    beta_2_power = ops.power(beta_2, t)
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=m.handle, v=v.handle,
        beta1_power=ops.power(beta_1, t), beta2_power=beta_2_power,
        lr=learning_rate, beta1=beta_1, beta2=beta_2,
        epsilon=epsilon * ops.sqrt(1.0 - beta_2_power), grad=gradient,
    )


def torch_adam(params, grads, m, v, learning_rate, beta_1, beta_2, epsilon, t):
    """`adam_reference` for lists of PyTorch tensors in one fused call
    (``torch.optim.adam.adam(fused=True)``, torch.optim.Adam's update); `t`,
    the update count, a float32 tensor on the parameters' device."""
    from torch.optim.adam import adam

    # one step tensor per parameter, t - 1: the call adds 1 to each first
    steps = list((t - 1.0).reshape(1).repeat(len(params)).unbind())
    adam(
        params, grads, m, v, [], steps, fused=True,
        amsgrad=False, beta1=beta_1, beta2=beta_2, lr=learning_rate,
        weight_decay=0.0, eps=epsilon, maximize=False,
    )


def momentum_reference(variable, trace, gradient, learning_rate, momentum, assign):
    """optax's SGD with momentum in ``keras.ops``: ``trace = g + momentum
    trace``, ``w -= lr trace``."""
    assign(trace, gradient + momentum * trace)
    assign(variable, variable - learning_rate * trace)


def tensorflow_momentum(variable, trace, gradient, learning_rate, momentum):
    """`momentum_reference` as TensorFlow's ``ResourceApplyMomentum`` kernel
    (``accum = accum momentum + grad; var -= lr accum``)."""
    import tensorflow as tf

    tf.raw_ops.ResourceApplyMomentum(
        var=variable.handle, accum=trace.handle, lr=learning_rate,
        grad=gradient, momentum=momentum,
    )


def torch_momentum(params, grads, traces, learning_rate, momentum):
    """`momentum_reference` for lists of PyTorch tensors in one fused call
    (``torch.optim.sgd.sgd(fused=True)``: ``buf = momentum buf + grad;
    param -= lr buf``, no dampening)."""
    from torch.optim.sgd import sgd

    sgd(
        params, grads, traces, fused=True, weight_decay=0.0, momentum=momentum,
        lr=learning_rate, dampening=0.0, nesterov=False, maximize=False,
    )
