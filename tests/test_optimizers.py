"""The paper's learning-rate schedule, optimizers and losses against NumPy
transcriptions of vit_jax / optax / Flax, on every backend."""

import keras
import numpy as np
import pytest
from helpers import save_and_reload
from helpers import to_numpy

from keras_vit.training.losses import SoftmaxCrossEntropy
from keras_vit.training.losses import sigmoid_cross_entropy
from keras_vit.training.losses import softmax_cross_entropy
from keras_vit.kernels import optimizers as kernels
from keras_vit.training.optimizers import AdamWeightDecay
from keras_vit.training.optimizers import MomentumSGD
from keras_vit.training.optimizers import finetune_optimizer
from keras_vit.training.optimizers import pretrain_optimizer
from keras_vit.training.schedules import WarmupDecaySchedule
from keras_vit.training.schedules import learning_rate_schedule

SHAPES = [(3, 4), (5,), (2, 2, 3)]
UPDATES = 5  # with 2 warm-up updates of 5: warm-up, its end and the decay


# -- NumPy references -----------------------------------------------------------

def vit_jax_lr(step, total_steps, base, decay_type, warmup_steps, linear_end=1e-5):
    """vit_jax/utils.py create_learning_rate_schedule, in NumPy (float64)."""
    lr = base
    progress = (step - warmup_steps) / float(total_steps - warmup_steps)
    progress = np.clip(progress, 0.0, 1.0)
    if decay_type == "linear":
        lr = linear_end + (lr - linear_end) * (1.0 - progress)
    elif decay_type == "cosine":
        lr = lr * 0.5 * (1.0 + np.cos(np.pi * progress))
    if warmup_steps:
        lr = lr * np.minimum(1.0, step / warmup_steps)
    return lr


def clip_by_global_norm(grads, max_norm):
    """optax.clip_by_global_norm."""
    norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
    return grads if norm < max_norm else [g / norm * max_norm for g in grads]


def optax_sgd(params, grad_fn, updates, lr_fn, momentum=0.9, clip=1.0):
    """optax.chain(clip_by_global_norm(clip), sgd(lr_fn, momentum)); update t
    (0, 1, ...) uses the gradient grad_fn(t, params) and learning rate lr_fn(t)."""
    params = [p.astype("float64") for p in params]
    trace = [np.zeros_like(p) for p in params]
    for t in range(updates):
        grads = clip_by_global_norm(grad_fn(t, params), clip)
        trace = [g + momentum * m for g, m in zip(grads, trace)]
        params = [p - lr_fn(t) * m for p, m in zip(params, trace)]
    return params


# The float32 computation (as Flax's) has beta_2 = float32(0.999), whose
# 1 - beta_2 differs from 0.001 by 1e-5 relative: the reference uses it.
BETA_1, BETA_2 = float(np.float32(0.9)), float(np.float32(0.999))


def flax_adam(params, grad_fn, updates, lr_fn, weight_decay, clip=1.0, eps=1e-8):
    """flax.optim.Adam(beta1, beta2, eps, weight_decay) after clip_by_global_norm:
    the decay is taken on the weight before the update and multiplied by the
    learning rate."""
    params = [p.astype("float64") for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t in range(updates):
        grads = clip_by_global_norm(grad_fn(t, params), clip)
        m = [BETA_1 * a + (1 - BETA_1) * g for a, g in zip(m, grads)]
        v = [BETA_2 * a + (1 - BETA_2) * g ** 2 for a, g in zip(v, grads)]
        m_hat = [a / (1 - BETA_1 ** (t + 1)) for a in m]
        v_hat = [b / (1 - BETA_2 ** (t + 1)) for b in v]
        params = [p - lr_fn(t) * (a / (np.sqrt(b) + eps) + weight_decay * p)
                  for p, a, b in zip(params, m_hat, v_hat)]
    return params


def log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


# -- helpers ------------------------------------------------------------------

def random_params_and_grads(accum_steps, seed=0, updates=UPDATES):
    """Initial values, and per update `accum_steps` micro-batch gradients whose
    mean has global norm well above 1 (so that clipping at 1 is active)."""
    rng = np.random.default_rng(seed)
    params = [rng.normal(size=s).astype("float32") for s in SHAPES]
    micro = [[[(3 * rng.normal(size=s)).astype("float32") for s in SHAPES]
              for _ in range(accum_steps)] for _ in range(updates)]
    means = [[np.mean([m[i] for m in update], axis=0, dtype="float64") for i in range(len(SHAPES))]
             for update in micro]
    assert min(np.sqrt(sum(np.sum(g ** 2) for g in mean)) for mean in means) > 2
    return params, micro, means


def apply(optimizer, grads, variables):
    """optimizer.apply on backend tensors (torch's clipping refuses NumPy arrays)."""
    optimizer.apply([keras.ops.convert_to_tensor(g) for g in grads], variables)


def apply_micro_batches(optimizer, params, micro):
    variables = [keras.Variable(p) for p in params]
    for update in micro:
        for grads in update:
            apply(optimizer, grads, variables)
    return [to_numpy(v) for v in variables]


# -- schedule -----------------------------------------------------------------

@pytest.mark.parametrize("decay_type", ["cosine", "linear"])
@pytest.mark.parametrize("warmup_steps", [0, 20])
def test_schedule_matches_vit_jax(decay_type, warmup_steps):
    total, base = 100, 0.03
    schedule = learning_rate_schedule(base, total, warmup_steps, decay_type)
    # step 0, during warm-up, its end, mid-decay, the last step, past the end
    steps = [0, 1, 7, warmup_steps, warmup_steps + 1, (total + warmup_steps) // 2, total - 1, total,
             total + 5]
    got = [float(to_numpy(schedule(step))) for step in steps]
    expected = [vit_jax_lr(step, total, base, decay_type, warmup_steps) for step in steps]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-9)
    if warmup_steps:
        assert got[0] == 0.0, "the first update has learning rate 0"
    assert got[steps.index(warmup_steps)] == pytest.approx(base)
    end = 1e-5 if decay_type == "linear" else 0.0
    assert got[-1] == pytest.approx(end, abs=1e-9)


def test_schedule_config_round_trip():
    schedule = learning_rate_schedule(1e-3, 1000, 100, "linear", linear_end=2e-5)
    config = schedule.get_config()
    assert config == dict(base_lr=1e-3, total_steps=1000, warmup_steps=100, decay_type="linear",
                          linear_end=2e-5)
    assert WarmupDecaySchedule.from_config(config).get_config() == config
    schedules = keras.optimizers.schedules
    restored = schedules.deserialize(schedules.serialize(schedule))
    assert type(restored) is WarmupDecaySchedule and restored.get_config() == config


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(total_steps=0, warmup_steps=0), "total_steps"),
        (dict(total_steps=10, warmup_steps=10), "smaller than `total_steps`"),
        (dict(total_steps=10, warmup_steps=-1), "warmup_steps"),
        (dict(total_steps=10.0, warmup_steps=1), "total_steps"),
        (dict(total_steps=10, warmup_steps=1, decay_type="step"), "Unknown decay_type 'step'"),
        (dict(total_steps=10, warmup_steps=1, base_lr=-1.0), "base_lr"),
    ],
)
def test_schedule_rejects_bad_arguments(kwargs, message):
    kwargs = {"base_lr": 0.1, **kwargs}
    with pytest.raises(ValueError, match=message):
        learning_rate_schedule(**kwargs)


# -- optimizers against optax / Flax -----------------------------------------

@pytest.mark.parametrize("decay_type, accum_steps", [("cosine", 1), ("linear", 2)])
def test_finetune_optimizer_matches_optax(accum_steps, decay_type):
    params, micro, means = random_params_and_grads(accum_steps)
    optimizer = finetune_optimizer(0.1, total_steps=UPDATES, warmup_steps=2, decay_type=decay_type,
                                   accum_steps=accum_steps)
    got = apply_micro_batches(optimizer, params, micro)
    expected = optax_sgd(params, lambda t, _: means[t], UPDATES,
                         lambda t: vit_jax_lr(t, UPDATES, 0.1, decay_type, 2))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-6)
    assert int(to_numpy(optimizer.iterations)) == UPDATES


def test_finetune_optimizer_differs_from_keras_sgd():
    """Keras's SGD keeps the learning rate in its velocity: other weights."""
    params, micro, _ = random_params_and_grads(1)
    ours = apply_micro_batches(finetune_optimizer(0.1, UPDATES, 2), params, micro)
    keras_sgd = keras.optimizers.SGD(learning_rate_schedule(0.1, UPDATES, 2), momentum=0.9,
                                     global_clipnorm=1.0)
    theirs = apply_micro_batches(keras_sgd, params, micro)
    assert max(np.abs(a - b).max() for a, b in zip(ours, theirs)) > 1e-2


@pytest.mark.parametrize("accum_steps", [1, 2])
def test_pretrain_optimizer_matches_flax_adam(accum_steps):
    params, micro, means = random_params_and_grads(accum_steps, seed=1)
    optimizer = pretrain_optimizer(0.1, total_steps=UPDATES, warmup_steps=2, weight_decay=0.3,
                                   accum_steps=accum_steps)
    got = apply_micro_batches(optimizer, params, micro)
    expected = flax_adam(params, lambda t, _: means[t], UPDATES,
                         lambda t: vit_jax_lr(t, UPDATES, 0.1, "linear", 2), weight_decay=0.3)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, atol=1e-6)


@pytest.mark.parametrize("make_optimizer", [finetune_optimizer, pretrain_optimizer])
@pytest.mark.slow_cases("finetune_optimizer")
def test_fused_kernels_give_the_keras_ops_update(make_optimizer, monkeypatch):
    """TensorFlow's ``ResourceApply*`` and PyTorch's fused ``torch.optim`` kernels
    (keras_vit.kernels.optimizers) update as the ``keras.ops`` path does (JAX
    runs that path: XLA fuses it)."""
    params, micro, _ = random_params_and_grads(2, seed=5)

    def run(**kwargs):
        optimizer = make_optimizer(0.1, UPDATES, 2, accum_steps=2, **kwargs)
        return apply_micro_batches(optimizer, params, micro)

    used = []
    for name in ("tensorflow_kernel_applies", "torch_kernel_applies"):
        def recorded(*args, _check=getattr(kernels, name)):
            used.append(_check(*args))
            return used[-1]
        monkeypatch.setattr(kernels, name, recorded)
    decay = {"weight_decay": 0.3} if make_optimizer is pretrain_optimizer else {}
    fused = run(**decay)
    assert any(used) == (keras.backend.backend() != "jax"), used

    for name in ("tensorflow_kernel_applies", "torch_kernel_applies"):
        monkeypatch.setattr(kernels, name, lambda *args: False)
    reference = run(**decay)
    for a, b in zip(fused, reference):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert max(np.abs(a - p).max() for a, p in zip(fused, params)) > 0.1  # the weights moved


def test_pretrain_weight_decay_is_lr_multiplied_and_excludable():
    """With a zero gradient Adam's step is 0: only w -= lr * wd * w remains."""
    optimizer = pretrain_optimizer(0.5, total_steps=4, warmup_steps=0, weight_decay=0.1,
                                   grad_norm_clip=None)
    optimizer.exclude_from_weight_decay(var_names=["bias"])
    kernel = keras.Variable(np.ones((2, 2), "float32"), name="kernel")
    bias = keras.Variable(np.ones((2,), "float32"), name="bias")
    apply(optimizer, [np.zeros((2, 2), "float32"), np.zeros((2,), "float32")], [kernel, bias])
    np.testing.assert_allclose(to_numpy(kernel), 1 - 0.5 * 0.1, atol=1e-7)
    np.testing.assert_allclose(to_numpy(bias), 1.0)


def test_schedule_advances_once_per_update():
    accum, total, warmup = 2, 6, 2
    optimizer = finetune_optimizer(0.1, total, warmup, accum_steps=accum)
    variable = keras.Variable(np.zeros(3, "float32"))
    for micro_batch in range(1, 3 * accum + 1):
        apply(optimizer, [np.ones(3, "float32")], [variable])
        expected = vit_jax_lr(micro_batch // accum, total, 0.1, "cosine", warmup)
        assert float(to_numpy(optimizer.learning_rate)) == pytest.approx(expected, rel=1e-6)
        assert int(to_numpy(optimizer.iterations)) == micro_batch // accum


def test_polyak_average_under_accumulation_is_per_update():
    """The shared base class keeps the average for both optimizers."""
    momentum, updates = 0.6, 4
    params, micro, means = random_params_and_grads(2, seed=2, updates=updates)
    averages = {}
    for accum in (1, 2):
        optimizer = finetune_optimizer(0.1, updates, warmup_steps=1, accum_steps=accum,
                                       use_ema=True, ema_momentum=momentum)
        variables = [keras.Variable(p) for p in params]
        after_updates = []
        for update, mean in zip(micro, means):
            for grads in (update if accum == 2 else [[g.astype("float32") for g in mean]]):
                apply(optimizer, grads, variables)
            after_updates.append([to_numpy(v).astype("float64") for v in variables])
        # Polyak averaging of the weights after each update; it starts at the first.
        expected = after_updates[0]
        for weights in after_updates[1:]:
            expected = [momentum * a + (1 - momentum) * w for a, w in zip(expected, weights)]
        got = [to_numpy(a) for a in optimizer._model_variables_moving_average]
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, atol=1e-6)
        optimizer.finalize_variable_values(variables)
        averages[accum] = [to_numpy(v) for v in variables]
    for a, b in zip(averages[1], averages[2]):
        np.testing.assert_allclose(a, b, atol=1e-6)


# -- through model.fit -------------------------------------------------------

def dense_model(initial_weights):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.set_weights(initial_weights)
    return model


def fit_dense(make_optimizer, batch_size, accum_steps, initial_weights, x, y):
    model = dense_model(initial_weights)
    model.compile(optimizer=make_optimizer(accum_steps), loss="mse")
    model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    return [to_numpy(w) for w in model.weights]


@pytest.mark.parametrize("kind", ["finetune", "pretrain"])
def test_fit_with_accumulation_equals_larger_batch(kind):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(24, 4)).astype("float32")
    y = (5 * rng.normal(size=(24, 3))).astype("float32")
    initial = [rng.normal(size=(4, 3)).astype("float32"), np.zeros(3, "float32")]
    updates, warmup = 4, 1

    def make_optimizer(accum_steps):
        if kind == "finetune":
            return finetune_optimizer(0.05, updates, warmup, accum_steps=accum_steps)
        return pretrain_optimizer(0.05, updates, warmup, accum_steps=accum_steps)

    accumulated = fit_dense(make_optimizer, 2, 3, initial, x, y)
    large_batch = fit_dense(make_optimizer, 6, 1, initial, x, y)
    for a, b in zip(accumulated, large_batch):
        np.testing.assert_allclose(a, b, atol=1e-6)

    # Both equal the NumPy reference, fed the analytic gradient of the mse.
    def mse_grads(t, params):
        xb, yb = x[6 * t:6 * t + 6], y[6 * t:6 * t + 6]
        error = xb @ params[0] + params[1] - yb
        return [2.0 / error.size * xb.T @ error, 2.0 / error.size * error.sum(axis=0)]

    if kind == "finetune":
        expected = optax_sgd(initial, mse_grads, updates,
                             lambda t: vit_jax_lr(t, updates, 0.05, "cosine", warmup))
    else:
        expected = flax_adam(initial, mse_grads, updates,
                             lambda t: vit_jax_lr(t, updates, 0.05, "linear", warmup), 0.1)
    for a, e in zip(accumulated, expected):
        np.testing.assert_allclose(a, e, atol=1e-6)


def test_fit_polyak_average_with_accumulation_equals_larger_batch():
    """Compiled (tf.function, jax.jit) as in training; fit ends with the average."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(24, 4)).astype("float32")
    y = (5 * rng.normal(size=(24, 3))).astype("float32")
    initial = [rng.normal(size=(4, 3)).astype("float32"), np.zeros(3, "float32")]

    def make_optimizer(accum_steps):
        return finetune_optimizer(0.05, 4, 1, accum_steps=accum_steps, use_ema=True,
                                  ema_momentum=0.5)

    averaged = fit_dense(make_optimizer, 2, 3, initial, x, y)
    for a, b in zip(averaged, fit_dense(make_optimizer, 6, 1, initial, x, y)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    plain = fit_dense(lambda k: finetune_optimizer(0.05, 4, 1, accum_steps=k), 6, 1, initial, x, y)
    assert max(np.abs(a - b).max() for a, b in zip(averaged, plain)) > 1e-3


def test_polyak_weights_stay_usable_after_fit(tmp_path):
    """fit ends with the averages in the model; predicting, saving and reading
    the weights afterwards must work (on JAX, Keras 3.15 left the weights
    sharing the averages' arrays, which the next donated call deleted)."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=pretrain_optimizer(0.01, 4, 1, use_ema=True, ema_momentum=0.5),
                  loss="mse")
    x = np.random.default_rng(9).normal(size=(8, 4)).astype("float32")
    model.fit(x, x[:, :3], batch_size=4, epochs=2, verbose=0)
    averages = [to_numpy(v) for v in model.optimizer._model_variables_moving_average]
    first = to_numpy(model.predict_on_batch(x))
    np.testing.assert_allclose(to_numpy(model.predict_on_batch(x)), first)
    for weight, average in zip(model.trainable_weights, averages):
        np.testing.assert_array_equal(to_numpy(weight), average)
    reloaded = save_and_reload(model, tmp_path)
    np.testing.assert_allclose(to_numpy(reloaded.predict_on_batch(x)), first, atol=1e-6)


@pytest.mark.parametrize("make_optimizer", [finetune_optimizer, pretrain_optimizer])
def test_mixed_float16_fit_updates_in_float32(make_optimizer):
    keras.config.set_dtype_policy("mixed_float16")
    rng = np.random.default_rng(4)
    # Small values: the loss times the initial loss scale (2 ** 15) stays a finite
    # float16, so that no update is skipped.
    x = (0.1 * rng.normal(size=(8, 4))).astype("float32")
    y = (0.1 * rng.normal(size=(8, 3))).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer=make_optimizer(0.05, 10, warmup_steps=0, accum_steps=2), loss="mse")
    before = [to_numpy(w).copy() for w in model.weights]
    history = model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    inner = model.optimizer.inner_optimizer
    assert isinstance(inner, (MomentumSGD, AdamWeightDecay))
    assert int(to_numpy(inner.iterations)) == 2
    assert np.isfinite(history.history["loss"]).all()
    for b, w in zip(before, model.weights):
        assert w.dtype == "float32"
        assert np.isfinite(to_numpy(w)).all() and not np.array_equal(b, to_numpy(w))
    assert all(v.dtype == "float32" for v in inner.variables if "iteration" not in v.path)


def test_float16_gradients_update_float32_variables_in_float32():
    """The update casts gradients up to the variable's dtype, never the variable down."""
    params, micro, _ = random_params_and_grads(1)
    half = [[[g.astype("float16") for g in grads] for grads in update] for update in micro]
    optimizer = finetune_optimizer(0.1, UPDATES, 2, grad_norm_clip=None)
    got = apply_micro_batches(optimizer, params, half)
    expected = optax_sgd(params, lambda t, _: [g.astype("float64") for g in half[t][0]], UPDATES,
                         lambda t: vit_jax_lr(t, UPDATES, 0.1, "cosine", 2), clip=np.inf)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e, atol=1e-6)


# -- serialization -------------------------------------------------------------

@pytest.mark.parametrize(
    "optimizer",
    [
        lambda: finetune_optimizer(0.01, 500, 50, momentum=0.8, accum_steps=2, use_ema=True,
                                   ema_momentum=0.999),
        lambda: pretrain_optimizer(1e-3, 1000, 100, "cosine", weight_decay=0.03, beta_2=0.99,
                                   grad_norm_clip=None, epsilon=1e-6),
    ],
)
def test_optimizer_config_round_trip(optimizer):
    optimizer = optimizer()
    config = optimizer.get_config()
    restored = type(optimizer).from_config(dict(config))
    assert restored.get_config() == config
    deserialized = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(deserialized) is type(optimizer) and deserialized.get_config() == config
    assert isinstance(restored._learning_rate, WarmupDecaySchedule)


def test_losses_config_round_trip():
    for loss in (softmax_cross_entropy(label_smoothing=0.1), sigmoid_cross_entropy()):
        config = loss.get_config()
        assert type(loss).from_config(config).get_config() == config
        restored = keras.losses.deserialize(keras.losses.serialize(loss))
        assert type(restored) is type(loss) and restored.get_config() == config
    assert SoftmaxCrossEntropy(0.2).get_config()["label_smoothing"] == 0.2


@pytest.mark.parametrize("kind", ["finetune", "pretrain"])
def test_compiled_model_saves_and_reloads(kind, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(8, 4)).astype("float32")
    y = keras.ops.convert_to_numpy(keras.ops.one_hot(rng.integers(0, 3, 8), 3))
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    if kind == "finetune":
        optimizer = finetune_optimizer(0.01, 20, 2, accum_steps=2, use_ema=True, ema_momentum=0.99)
        loss = softmax_cross_entropy(label_smoothing=0.1)
    else:
        optimizer = pretrain_optimizer(1e-3, 20, 2, weight_decay=0.03)
        loss = sigmoid_cross_entropy()
    model.compile(optimizer=optimizer, loss=loss)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    reloaded = save_and_reload(model, tmp_path)
    assert type(reloaded.optimizer) is type(optimizer)
    assert reloaded.optimizer.get_config() == optimizer.get_config()
    assert type(reloaded.loss) is type(loss) and reloaded.loss.get_config() == loss.get_config()
    for a, b in zip(reloaded.optimizer.variables, optimizer.variables):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    np.testing.assert_allclose(to_numpy(reloaded(x)), to_numpy(model(x)), atol=1e-6)


# -- losses ---------------------------------------------------------------------

def test_softmax_cross_entropy_matches_vit_jax():
    rng = np.random.default_rng(6)
    logits = (3 * rng.normal(size=(5, 7))).astype("float32")
    hard = np.eye(7, dtype="float32")[rng.integers(0, 7, 5)]
    soft = rng.dirichlet(np.ones(7), 5).astype("float32")
    for labels in (hard, soft):
        expected = -np.mean(np.sum(labels * log_softmax(logits.astype("float64")), axis=-1))
        got = float(to_numpy(softmax_cross_entropy()(labels, logits)))
        assert got == pytest.approx(expected, rel=1e-6)
    smoothed = hard * 0.9 + 0.1 / 7
    expected = -np.mean(np.sum(smoothed * log_softmax(logits.astype("float64")), axis=-1))
    got = float(to_numpy(softmax_cross_entropy(label_smoothing=0.1)(hard, logits)))
    assert got == pytest.approx(expected, rel=1e-6)
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    assert got == pytest.approx(float(to_numpy(keras_loss(hard, logits))), rel=1e-5)


def test_sigmoid_cross_entropy_matches_big_vision():
    rng = np.random.default_rng(7)
    logits = (3 * rng.normal(size=(4, 9))).astype("float32")
    multi_hot = (rng.uniform(size=(4, 9)) < 0.3).astype("float32")
    soft = rng.uniform(size=(4, 9)).astype("float32")
    for labels in (multi_hot, soft):
        x = logits.astype("float64")
        expected = -np.mean(np.sum(labels * log_sigmoid(x) + (1 - labels) * log_sigmoid(-x), -1))
        got = float(to_numpy(sigmoid_cross_entropy()(labels, logits)))
        assert got == pytest.approx(expected, rel=1e-6)
    # A sum over classes: `classes` times Keras's BinaryCrossentropy (a mean).
    bce = keras.losses.BinaryCrossentropy(from_logits=True)(multi_hot, logits)
    assert float(to_numpy(sigmoid_cross_entropy()(multi_hot, logits))) == pytest.approx(
        9 * float(to_numpy(bce)), rel=1e-5)


def test_losses_stay_finite_and_float32_for_large_and_float16_logits():
    logits = np.array([[1e4, -1e4, 0.0], [-3e4, 2e4, 5.0]], "float32")
    labels = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], "float32")
    x = logits.astype("float64")
    expected_softmax = -np.mean(np.sum(labels * log_softmax(x), -1))
    expected_sigmoid = -np.mean(
        np.sum(labels * log_sigmoid(x) + (1 - labels) * log_sigmoid(-x), -1))
    assert float(to_numpy(softmax_cross_entropy()(labels, logits))) == pytest.approx(
        expected_softmax, rel=1e-6)
    assert float(to_numpy(sigmoid_cross_entropy()(labels, logits))) == pytest.approx(
        expected_sigmoid, rel=1e-6)
    # float16 logits near float16's largest value (65504): computed in float32.
    half = np.array([[6e4, -6e4, 0.0]], "float16")
    for loss in (softmax_cross_entropy(0.1), sigmoid_cross_entropy()):
        value = loss(np.array([[0.0, 1.0, 0.0]], "float16"), keras.ops.convert_to_tensor(half))
        assert keras.backend.standardize_dtype(value.dtype) == "float32"
        assert np.isfinite(to_numpy(value)) and float(to_numpy(value)) > 1e4


def test_losses_reject_class_indices():
    with pytest.raises(ValueError, match="one-hot"):
        softmax_cross_entropy()(np.array([0, 2]), np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match="label_smoothing"):
        softmax_cross_entropy(label_smoothing=1.5)


# -- bad arguments ------------------------------------------------------------------

@pytest.mark.parametrize("make_optimizer", [finetune_optimizer, pretrain_optimizer])
@pytest.mark.parametrize("accum_steps", [0, -2, 2.0, "2", True])
def test_bad_accum_steps(make_optimizer, accum_steps):
    with pytest.raises(ValueError, match=r"`accum_steps` must be an int >= 1"):
        make_optimizer(0.1, 100, 10, accum_steps=accum_steps)


@pytest.mark.parametrize(
    "make_optimizer, kwargs, message",
    [
        (finetune_optimizer, dict(decay_type="exponential"), "Unknown decay_type 'exponential'"),
        (pretrain_optimizer, dict(warmup_steps=100), r"`warmup_steps` \(100\) must be smaller"),
        (finetune_optimizer, dict(global_clipnorm=2.0), "use `grad_norm_clip`"),
        (pretrain_optimizer, dict(gradient_accumulation_steps=2), "use `accum_steps`"),
        (finetune_optimizer, dict(accum_steps=2, use_ema=True, ema_overwrite_frequency=5),
         "`ema_overwrite_frequency` is not supported with gradient accumulation"),
        (finetune_optimizer, dict(momentum=1.5), r"`momentum` must be a number in \[0, 1\]"),
        (pretrain_optimizer, dict(beta_1=1.0), r"`beta_1` must be a number in \[0, 1\)"),
    ],
)
def test_bad_optimizer_arguments(make_optimizer, kwargs, message):
    kwargs = {"base_lr": 0.1, "total_steps": 100, "warmup_steps": 10, **kwargs}
    with pytest.raises(ValueError, match=message):
        make_optimizer(**kwargs)
