"""Fine-tuning that fits: DoRA against peft's own numbers, visual prompt
tuning against a reference written from VPT's code, adapters saved apart
from their base and loaded on it again, merged for deployment, and each
bad input refused by name."""

import json
import os

import keras
import numpy as np
import pytest
from checkpoint_files import save_npz
from helpers import save_and_reload
from helpers import to_numpy
from reference import random_vit_params
from reference import vit_forward

import keras_vit
from keras_vit import ViT
from keras_vit import kernels
from keras_vit import variants
from keras_vit.adapters import adapter_methods
from keras_vit.adapters import read_adapters

BACKEND = keras.backend.backend()
DATA = os.path.join(os.path.dirname(__file__), "data")
TINY = dict(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32,
            num_classes=3)
EXPORTS = {"onnx": ("tensorflow", "jax", "torch"), "openvino": ("tensorflow", "torch"),
           "tf_saved_model": ("tensorflow", "jax"), "litert": ("tensorflow",),
           "torch": ("torch",)}  # and Keras 3.15 exports them (LiteRT from torch with litert-torch)


def random_model(seed=0, **changes):
    """A tiny ViT with every weight random, the head's too."""
    model = ViT(**{**TINY, **changes})
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype("float32"))
    return model


def copy_of(model):
    clone = ViT.from_config(model.get_config())
    clone.set_weights(model.get_weights())
    return clone


def moved(model, seed=1):
    """`model` with its trainable weights moved from their initial values, as training would."""
    rng = np.random.default_rng(seed)
    for variable in model.trainable_weights:
        variable.assign(to_numpy(variable) + rng.normal(0, 0.2, variable.shape).astype("float32"))
    return model


def images(n=3, seed=2, size=32):
    return np.random.default_rng(seed).uniform(-1, 1, (n, size, size, 3)).astype("float32")


# -- DoRA, as peft computes it --------------------------------------------------------

def _dora_layer(kind, peft):
    """A Keras projection with peft's weights in: a ``Dense`` (peft's
    ``nn.Linear``), or the attention's ``out`` ``EinsumDense`` whose
    ``(heads, head_dim, D)`` kernel is the same matrix."""
    if kind == "dense":
        layer, shape = keras.layers.Dense(5), (None, 4, 6)
    else:
        layer, shape = keras.layers.EinsumDense("btnh,nhd->btd", output_shape=(None, 5), bias_axes="d"), (None, 4, 2, 3)
    layer.build(shape)
    layer.kernel.assign(peft["kernel"].reshape(layer.kernel.shape))
    layer.bias.assign(peft["bias"])
    variants.add_dora(layer, int(peft["rank"].item()), float(peft["alpha"].item()))
    w0 = peft["kernel"]  # B starts at zero: m starts at the norm of W0 per output unit
    np.testing.assert_allclose(to_numpy(layer.dora_magnitude).reshape(-1), np.linalg.norm(w0, axis=0), rtol=1e-6)
    for name in ("lora_kernel_a", "lora_kernel_b"):
        getattr(layer, name).assign(peft[name].reshape(getattr(layer, name).shape))
    kernel = to_numpy(layer.kernel).reshape(w0.shape)  # peft's m starts at the norm of W0 + s B A
    np.testing.assert_allclose(np.linalg.norm(kernel, axis=0), peft["magnitude_init"], rtol=1e-5)
    return layer, peft["x"].reshape(3, *shape[1:])


def _value_and_gradients(layer, x, cotangent):
    """``kernels.dense(layer, x)`` and the gradients of ``sum(y * cotangent)``
    with respect to A, B and m, through the backend's autodiff."""
    trained = [layer.lora_kernel_a, layer.lora_kernel_b, layer.dora_magnitude]
    values = [to_numpy(v) for v in trained]

    def loss(*arrays):
        with keras.StatelessScope(state_mapping=list(zip(trained, arrays))):
            y = kernels.dense(layer, x)
        return y, keras.ops.sum(y * keras.ops.convert_to_tensor(cotangent))

    if BACKEND == "jax":
        import jax

        grads = jax.grad(lambda *a: loss(*a)[1], argnums=(0, 1, 2))(*values)
        return to_numpy(loss(*values)[0]), [np.asarray(g) for g in grads]
    if BACKEND == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(v) for v in values]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            y, value = loss(*tensors)
        return to_numpy(y), [g.numpy() for g in tape.gradient(value, tensors)]
    import torch

    tensors = [torch.tensor(v, requires_grad=True) for v in values]
    y, value = loss(*tensors)
    value.backward()
    return to_numpy(y.detach()), [t.grad.numpy() for t in tensors]


@pytest.mark.parametrize("kind", ["dense", "einsum"])
def test_dora_gives_pefts_outputs_and_gradients(kind):
    """peft's ``DoraLinearLayer`` (tests/data/make_dora_peft.py) on an
    ``nn.Linear``: Keras's layer with the same W0, b, A, B and a trained
    magnitude gives its outputs and the gradients of A, B and m within 1e-5."""
    peft = dict(np.load(os.path.join(DATA, "dora_peft.npz")))
    layer, x = _dora_layer(kind, peft)
    layer.dora_magnitude.assign(peft["magnitude"])
    y, (grad_a, grad_b, grad_m) = _value_and_gradients(layer, x, peft["g"])
    np.testing.assert_allclose(y.reshape(peft["y"].shape), peft["y"], atol=1e-5)
    np.testing.assert_allclose(grad_a.reshape(peft["grad_lora_kernel_a"].shape), peft["grad_lora_kernel_a"], atol=1e-5)
    np.testing.assert_allclose(grad_b, peft["grad_lora_kernel_b"], atol=1e-5)
    np.testing.assert_allclose(grad_m, peft["grad_magnitude"], atol=1e-5)


@pytest.mark.slow
def test_dora_trains_its_factors_and_magnitudes_and_merges_to_the_same_logits(tmp_path):
    """``enable_dora``: the contract's variables on every projection, the
    model unchanged at first, only they and the head trainable; after
    ``fit`` the frozen weights are unchanged and ``merge_dora`` (and
    ``merge_adapters``) gives a plain ViT with the same logits, which saves."""
    model = random_model()
    x = images(8)
    before = to_numpy(model(x))
    model.enable_dora(2, alpha=4)
    np.testing.assert_allclose(to_numpy(model(x)), before, atol=1e-5)
    names = {v.path.rsplit("/", 1)[-1] for v in model.trainable_weights}
    assert names == {"lora_kernel_a", "lora_kernel_b", "dora_magnitude", "kernel", "bias"}
    assert {v.path.split("/")[0] for v in model.trainable_weights if v.path.endswith(("/kernel", "/bias"))} == {"head"}
    query = model.get_layer("encoder_block_0").attention.query
    assert tuple(query.dora_magnitude.shape) == (2, 8) and query.lora_alpha == 4 and query.lora_rank == 2
    assert tuple(model.get_layer("encoder_block_0").mlp.fc1.dora_magnitude.shape) == (32,)
    frozen = {v.path: to_numpy(v).copy() for v in model.weights if not v.trainable}
    magnitude = to_numpy(query.dora_magnitude).copy()
    model.compile(optimizer=keras.optimizers.Adam(3e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, np.arange(8) % 3, batch_size=8, epochs=2, verbose=0)
    for v in model.weights:
        if v.path in frozen:
            np.testing.assert_array_equal(to_numpy(v), frozen[v.path], err_msg=v.path)
    tuned = to_numpy(model(x))
    assert np.abs(tuned - before).max() > 1e-3
    assert np.abs(to_numpy(query.dora_magnitude) - magnitude).max() > 1e-3
    merged = model.merge_dora()
    assert not any(v.path.rsplit("/", 1)[-1] in variants.ADAPTER_VARIABLES for v in merged.weights)
    np.testing.assert_allclose(to_numpy(merged(x)), tuned, atol=1e-5)
    np.testing.assert_allclose(to_numpy(model.merge_adapters()(x)), tuned, atol=1e-5)
    np.testing.assert_allclose(to_numpy(save_and_reload(merged, tmp_path)(x)), tuned, atol=1e-5)


@pytest.mark.parametrize("options", [dict(mlp_activation="swiglu"), dict(qkv_bias=False, out_bias=False)],
                         ids=["swiglu", "no-biases"])
def test_dora_adapts_the_fused_gate_and_projections_without_bias(options):
    """SwiGLU's fused ``fc1`` (gate and value in one kernel) and projections
    without a bias take DoRA too: a magnitude per output unit, and the
    merged model gives the adapted one's logits."""
    model = random_model(**options)
    model.enable_dora(2)
    fc1 = model.get_layer("encoder_block_0").mlp.fc1
    assert tuple(fc1.dora_magnitude.shape) == (fc1.kernel.shape[-1],)
    moved(model)
    x = images(2)
    np.testing.assert_allclose(to_numpy(model.merge_adapters()(x)), to_numpy(model(x)), atol=1e-5)


# -- VPT, as KMnP/vpt computes it ----------------------------------------------------

@pytest.mark.parametrize("pooling, deep", [("token", False), ("token", True), ("gap", True), ("map", True)])
def test_prompts_give_the_logits_of_vpts_code(pooling, deep, tmp_path):
    """A vit_jax checkpoint read by keras_vit, prompted with the same prompt
    values as the reference written from VPT's ``PromptedTransformer``
    (tests/reference.py): the same logits within 1e-5; without a [class]
    token the pooling reads the patches alone."""
    params = random_vit_params(pooling=pooling)
    if pooling == "map":  # a big_vision file: the MAP head's own names
        from checkpoint_files import to_big_vision
        path = save_npz(to_big_vision(params), tmp_path / "vit.npz")
    else:
        path = save_npz(params, tmp_path / "vit.npz")
    model = ViT.from_checkpoint(path).with_prompts(3, deep=deep)
    prompts = np.random.default_rng(4).normal(0, 1, model.parts.prompts.prompts.shape).astype("float32")
    model.parts.prompts.prompts.assign(prompts)
    x = images(2)
    expected = vit_forward(params, x, prompts=prompts)
    np.testing.assert_allclose(to_numpy(model(x)), expected, atol=1e-5)
    assert tuple(prompts.shape) == ((2 if deep else 1), 3, 32)


def test_prompts_start_uniform_within_vpts_bound_and_train_alone():
    """VPT's initialisation, uniform in +-sqrt(6 / (3 p^2 + d)); the
    prompts and the head train, and nothing else moves."""
    model = random_model(patch_size=4).with_prompts(50, deep=True, dropout=0.1)
    values = to_numpy(model.parts.prompts.prompts)
    bound = np.sqrt(6 / (3 * 16 + 16))
    assert values.shape == (2, 50, 16) and np.abs(values).max() <= bound
    assert np.abs(values).max() > 0.9 * bound and abs(values.mean()) < 0.1 * bound
    assert model.parts.prompts.dropout.rate == 0.1
    assert [v.path for v in model.trainable_weights] == ["prompts/prompts", "head/kernel", "head/bias"]
    frozen = {v.path: to_numpy(v).copy() for v in model.weights if not v.trainable}
    start = values.copy()
    model.compile(optimizer=keras.optimizers.Adam(3e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images(8), np.arange(8) % 3, batch_size=8, epochs=2, verbose=0)
    for v in model.weights:
        if v.path in frozen:
            np.testing.assert_array_equal(to_numpy(v), frozen[v.path], err_msg=v.path)
    assert np.abs(to_numpy(model.parts.prompts.prompts) - start).max() > 1e-3


def test_prompts_go_after_the_class_distillation_and_register_tokens():
    """``[x_class; x_distill; registers; prompts; patches]``: the prompts sit
    after the prefix tokens, the prefix tokens and patches are the base
    model's, and each deep block's prompt rows are its own."""
    base = random_model(distillation=True, num_registers=2, num_layers=3)
    model = base.with_prompts(4, deep=True)
    prompts = to_numpy(model.parts.prompts.prompts)
    x = images(2)
    want, got = base.intermediates(x), model.intermediates(x)
    embeddings = to_numpy(got["embeddings"])
    np.testing.assert_allclose(embeddings[:, :4], to_numpy(want["embeddings"])[:, :4], atol=1e-6)
    np.testing.assert_allclose(embeddings[:, 4:8], np.broadcast_to(prompts[0], (2, 4, 16)), atol=1e-6)
    np.testing.assert_allclose(embeddings[:, 8:], to_numpy(want["embeddings"])[:, 4:], atol=1e-6)
    assert tuple(got["encoder_block_1"].shape) == (2, 4 + 4 + 16, 16)
    assert tuple(got["attention_2"].shape) == (2, 2, 24, 24) and tuple(got["encoded"].shape) == (2, 20, 16)
    block = model.get_layer("encoder_block_1")
    replaced = model.parts.prompts(got["encoder_block_0"], block=1)
    np.testing.assert_allclose(to_numpy(replaced)[:, 4:8], np.broadcast_to(prompts[1], (2, 4, 16)), atol=1e-6)
    np.testing.assert_allclose(to_numpy(block(replaced)), to_numpy(got["encoder_block_1"]), atol=1e-5)
    np.testing.assert_allclose(to_numpy(model(x)), to_numpy(got["logits"]), atol=1e-5)


def test_prompts_compose_with_sizes_features_pictures_and_saving(tmp_path):
    """A prompted model at another resolution keeps its prompts; its
    feature maps, rollout and attention distances read the patches alone;
    a ``.keras`` file gives the same logits, and fresh prompts differ."""
    model = moved(random_model().with_prompts(3, deep=True))
    x = images(2)
    logits = to_numpy(model(x))
    larger = model.with_image_size(48)
    np.testing.assert_array_equal(to_numpy(larger.parts.prompts.prompts), to_numpy(model.parts.prompts.prompts))
    x48 = images(2, size=48)
    resampled = model.call(keras.ops.convert_to_tensor(x48), resample_method="bilinear")
    np.testing.assert_allclose(to_numpy(resampled), to_numpy(larger(x48)),
                               atol=1e-5)  # what export(..., dynamic_image_size=True) traces
    maps = model.feature_model(layers=[1], prefix_tokens=True)(x)
    assert tuple(maps["encoder_block_1"].shape) == (2, 4, 4, 16)
    assert tuple(maps["encoder_block_1_prefix"].shape) == (2, 1 + 3, 16)
    tokens = to_numpy(model.intermediates(x)["encoder_block_1"])
    np.testing.assert_allclose(to_numpy(maps["encoder_block_1"]).reshape(2, 16, 16),
                               to_numpy(model.parts.encoder_norm(tokens[:, 4:])), atol=1e-5)
    rollout = keras_vit.explain.attention_rollout(model, x)
    assert rollout.shape == (2, 4, 4)
    np.testing.assert_allclose(rollout.sum(axis=(1, 2)), 1.0, atol=1e-5)
    assert keras_vit.explain.mean_attention_distance(model, x).shape == (2, 2)
    reloaded = save_and_reload(model, tmp_path)
    assert reloaded.config.prompt_tokens == 3 and reloaded.config.deep_prompts
    np.testing.assert_allclose(to_numpy(reloaded(x)), logits, atol=1e-6)


@pytest.mark.parametrize("fmt", list(EXPORTS))
@pytest.mark.slow_cases("onnx", "openvino", "litert")  # the SavedModel and .pt2: the fast tier's
def test_a_prompted_model_exports_with_its_prompts(fmt, tmp_path):
    """Every export route of the backend runs the prompted model: its
    artifact gives the model's logits at batches of 3 and 1."""
    from keras_vit.export import runtime

    if BACKEND not in EXPORTS[fmt]:
        pytest.skip(f"Keras 3.15 exports {fmt} from {', '.join(EXPORTS[fmt])}, not from {BACKEND}")
    model = moved(random_model().with_prompts(3, deep=True))
    path = str(tmp_path / {"onnx": "vit.onnx", "openvino": "vit.xml", "tf_saved_model": "saved",
                           "litert": "vit.tflite", "torch": "vit.pt2"}[fmt])
    model.export(path, format=fmt, verbose=False)
    run = runtime.load(path)
    x = images(3)
    want = to_numpy(model(x))
    for batch in (x, x[:1]):
        np.testing.assert_allclose(run(batch)["logits"], want[:len(batch)], atol=1e-5)


# -- adapters apart from the base ---------------------------------------------------------

def adapted(method, base):
    """A copy of `base` adapted by `method`, its trained weights moved."""
    model = copy_of(base)
    if method in ("vpt-shallow", "vpt-deep"):
        model = model.with_prompts(3, deep=method == "vpt-deep")
    elif method == "lora":
        model.enable_lora(2, target=("query", "value", "fc1"), lora_alpha=4)
    elif method == "dora":
        model.enable_dora(2, alpha=4)
    else:  # the head alone
        for layer in model.layers:
            layer.trainable = layer.name == "head"
    return moved(model)


@pytest.mark.parametrize("method", ["lora", "dora", "vpt-shallow", "vpt-deep", "head"])
def test_adapters_load_on_their_base_with_the_same_logits(method, tmp_path):
    """``save_adapters`` writes the trained weights alone, with the method,
    its settings and the base's identity; ``keras_vit.load_adapters`` on a
    base loaded again gives the adapted model's logits."""
    base = random_model()
    model = adapted(method, base)
    x = images(2)
    logits = to_numpy(model(x))
    path = model.save_adapters(tmp_path / "adapters.safetensors")
    tensors, record = read_adapters(path)
    assert set(tensors) == {v.path for v in model.trainable_weights}
    assert record["method"] == method and record["base"] == "vit"
    assert record["settings"] == adapter_methods(model)
    given = copy_of(base)
    again = keras_vit.load_adapters(given, path)
    np.testing.assert_allclose(to_numpy(again(x)), logits, atol=1e-6)
    assert adapter_methods(given) == {} and all(v.trainable for v in given.weights)  # as it was
    assert sorted(v.path for v in again.trainable_weights) == sorted(tensors)
    if method == "lora":
        assert record["settings"]["lora"] == {"rank": 2, "alpha": 4, "target": ["query", "value", "fc1"]}


@pytest.mark.slow
def test_the_adapter_file_holds_a_sliver_of_the_model(tmp_path):
    """A rank-8 LoRA of a ViT-B/16 (every block's q, k, v, out, fc1, fc2, and
    a 10-class head): the file holds its trained weights in float32 and a
    header, 4.15% of the model's float32 weights (docs/fine_tuning.md: Keras
    factors each (768, 12, 64) q, k, v kernel per head)."""
    model = ViT.from_preset("vit_b16", num_classes=10)
    base = model.count_params()
    model.enable_lora(8)
    trained = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trained == 12 * (3 * (768 * 12 * 8 + 8 * 64) + (12 * 64 * 8 + 8 * 768) + 2 * (768 * 8 + 8 * 3072)) + 7690
    path = model.save_adapters(tmp_path / "lora.safetensors")
    size = os.path.getsize(path)
    print(f"ViT-B/16 rank-8 LoRA adapters: {size / 2**20:.2f} MiB, {size / (4 * base):.2%} of the model's "
          f"{4 * base / 2**20:.0f} MiB")
    assert 4 * trained < size < 4 * trained + 2**16
    assert round(4 * trained / (4 * base), 4) == 0.0415


@pytest.mark.slow
def test_merged_adapters_export_and_quantize_as_a_plain_vit(tmp_path):
    """LoRA and DoRA merged: ONNX gives the unmerged model's logits within
    1e-5; quantized to int8 by Keras it stays near them; merged, it merges
    tokens as a plain ViT."""
    from keras_vit.export import runtime

    base = random_model()
    x = images(3)
    for method in ("lora", "dora"):
        model = adapted(method, base)
        logits = to_numpy(model(x))
        merged = model.merge_adapters()
        path = str(tmp_path / f"{method}.onnx")
        merged.export(path, format="onnx", verbose=False)
        np.testing.assert_allclose(runtime.load(path)(x)["logits"], logits, atol=1e-5)
        quantized = copy_of(merged)
        quantized.quantize("int8")
        error = np.abs(to_numpy(quantized(x)) - logits).max() / (logits.max() - logits.min())
        assert error < 0.05, (method, error)
        assert tuple(merged.with_token_merging(2)(x).shape) == (3, 3)


# -- bad input ------------------------------------------------------------------------

def test_bad_adapters_are_refused_by_name_and_change_nothing(tmp_path):
    model = random_model()
    weights = [to_numpy(w) for w in model.weights]
    with pytest.raises(ValueError, match=r"`rank` must be an int >= 1, got 0"):
        model.enable_dora(0)
    with pytest.raises(ValueError, match=r"rank 9 is above the width of encoder_block_0/attention/query \(8: "):
        model.enable_dora(9)
    with pytest.raises(ValueError, match=r"DoRA targets must be among .*got \('qkv',\)"):
        model.enable_dora(2, target="qkv")
    assert not any(layer.lora_enabled for layer in variants.projections(model).values())
    assert all(np.array_equal(to_numpy(w), v) for w, v in zip(model.weights, weights))

    quantized = copy_of(model)
    quantized.quantize("int8")
    with pytest.raises(ValueError, match=r"DoRA cannot adapt encoder_block_0/attention/query, which is "
                                         r"quantized \(int8\).*merge_adapters\(\).quantize"):
        quantized.enable_dora(2)
    dora = copy_of(model)
    dora.enable_dora(2)
    with pytest.raises(ValueError, match=r"has DoRA .*Merge it first: `model.merge_adapters\(\).quantize\('int8'\)`"):
        dora.quantize("int8")
    with pytest.raises(ValueError, match=r"already has DoRA"):
        dora.enable_lora(2)
    with pytest.raises(ValueError, match=r"save_adapters"):
        dora.save(str(tmp_path / "dora.keras"))
    with pytest.raises(ValueError, match=r"`save_weights`.*merge_adapters\(\).save_weights"):
        dora.save_weights(str(tmp_path / "dora.weights.h5"))
    assert not (tmp_path / "dora.keras").exists() and not (tmp_path / "dora.weights.h5").exists()

    with pytest.raises(ValueError, match=r"cannot go with NaFlex"):
        model.with_naflex(16).with_prompts(4)
    with pytest.raises(ValueError, match=r"cannot go with token merging .*prompts are never merged"):
        model.with_token_merging(2).with_prompts(4)
    with pytest.raises(ValueError, match=r"cannot go with token merging"):
        model.with_prompts(4).with_token_merging(2)
    with pytest.raises(ValueError, match=r"prompts stay as tokens|stay as tokens"):
        model.with_prompts(4).merge_adapters()
    with pytest.raises(ValueError, match=r"`num_tokens` must be an int >= 1"):
        model.with_prompts(0)

    path = dora.save_adapters(tmp_path / "dora.safetensors")
    other = random_model(seed=5)
    with pytest.raises(ValueError, match=r"was trained on the base 'vit' \(weights sha256 [0-9a-f]{12}...\), "
                                         r"and the model given is 'vit' \(sha256 [0-9a-f]{12}...\): other weights"):
        keras_vit.load_adapters(other, path)
    assert not any(layer.lora_enabled for layer in variants.projections(other).values())
    lora = copy_of(model)
    lora.enable_lora(2)
    with pytest.raises(ValueError, match=r"holds dora adapters, and vit already has lora"):
        keras_vit.load_adapters(lora, path)
    with pytest.raises(ValueError, match=r"Every weight of vit is trainable"):
        model.save_adapters(tmp_path / "all.safetensors")
    assert not (tmp_path / "all.safetensors").exists()
    (tmp_path / "checkpoint.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(ValueError, match=r"is not a safetensors file"):
        keras_vit.load_adapters(model, tmp_path / "checkpoint.safetensors")
    record = json.loads(json.dumps(read_adapters(path)[1]["settings"]))
    assert record == {"dora": {"rank": 2, "alpha": 2, "target": list(variants.PROJECTION_NAMES)}}


# -- the command line --------------------------------------------------------------------

def _cli(argv, capsys):
    from keras_vit.cli import main

    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    return out


@pytest.mark.parametrize("adapter, flags", [("dora", ["--rank", "2", "--alpha", "4"]),
                                            ("vpt-deep", ["--prompts", "3"])], ids=["dora", "vpt-deep"])
@pytest.mark.slow
def test_finetune_writes_adapters_that_predict_and_export_put_on_the_base(adapter, flags, tmp_path, capsys):
    """``keras-vit finetune --adapter`` writes adapters.safetensors beside
    model.keras; ``predict BASE --adapters FILE`` classifies as the
    model.keras does, ``export BASE --adapters FILE`` gives its logits, and
    the same command again trains nothing."""
    from helpers import TINY_RUN
    from helpers import TINY_RUN_MODEL
    from helpers import run_flags
    from keras_vit.export import runtime

    base = random_model(**{**TINY_RUN_MODEL, "image_size": 16, "num_classes": 10,
                           "class_names": [str(i) for i in range(10)]})
    base.save(tmp_path / "base.keras")
    workdir = tmp_path / "ft"
    argv = ["finetune", "--workdir", str(workdir), "--init", str(tmp_path / "base.keras"), "--image-size", "16",
            *run_flags(**TINY_RUN), "--adapter", adapter, *flags]
    _cli(argv, capsys)
    tensors, record = read_adapters(workdir / "adapters.safetensors")
    assert record["method"] == adapter and record["base"] == str(tmp_path / "base.keras")
    tuned = keras.saving.load_model(workdir / "model.keras")
    assert not any(v.path.rsplit("/", 1)[-1] in variants.ADAPTER_VARIABLES for v in tuned.weights)
    x = images(4, size=16)
    again = keras_vit.load_adapters(keras.saving.load_model(tmp_path / "base.keras"), workdir / "adapters.safetensors")
    np.testing.assert_allclose(to_numpy(again(x)), to_numpy(tuned(x)), atol=1e-5)
    _cli(argv, capsys)  # a finished run: nothing trained again
    tensors_again, record_again = read_adapters(workdir / "adapters.safetensors")
    assert record_again == record and tensors_again.keys() == tensors.keys()
    for key, value in tensors.items():
        np.testing.assert_array_equal(tensors_again[key], value, err_msg=key)

    picture = tmp_path / "digit.png"
    keras.utils.save_img(picture, np.random.default_rng(0).integers(0, 255, (16, 16, 3)).astype("uint8"))
    tops = [_cli(["predict", str(model), str(picture), "--top-k", "3", *extra], capsys).splitlines()[1:]
            for model, extra in ((workdir / "model.keras", []),
                                 (tmp_path / "base.keras", ["--adapters", str(workdir / "adapters.safetensors")]))]
    assert [line.split()[-1] for line in tops[0]] == [line.split()[-1] for line in tops[1]]
    onnx = tmp_path / "adapted.onnx"
    _cli(["export", str(tmp_path / "base.keras"), str(onnx), "--format", "onnx", "--adapters",
          str(workdir / "adapters.safetensors")], capsys)
    np.testing.assert_allclose(runtime.load(str(onnx))(x)["logits"], to_numpy(tuned(x)), atol=1e-5)


@pytest.mark.slow
def test_evaluate_runs_vtab_with_an_adapter(tmp_path, capsys):
    """``keras-vit evaluate --benchmark vtab1k --adapter vpt-shallow``: the
    task's fine-tuning runs train prompts and the head, each run's adapter
    file says so, and the results hold the task's accuracy."""
    from helpers import TINY_RUN_MODEL

    base = random_model(**{**TINY_RUN_MODEL, "image_size": 16, "num_classes": 10})
    base.save(tmp_path / "base.keras")
    out = tmp_path / "vtab"
    _cli(["evaluate", str(tmp_path / "base.keras"), "--benchmark", "vtab1k", "--tasks", "digits", "--out", str(out),
          "--adapter", "vpt-shallow", "--prompts", "2", "--finetune",
          "image_size=16,batch_size=16,accum_steps=1,steps=2,warmup_steps=1,checkpoint_every=2"], capsys)
    results = json.loads((out / "results.json").read_text())
    assert 0 <= results["benchmarks"]["vtab1k"]["tasks"]["digits"]["top1"] <= 100
    assert results["settings"]["finetune"]["adapter"] == "vpt-shallow"
    files = list(out.rglob("adapters.safetensors"))
    assert files and all(read_adapters(f)[1]["method"] == "vpt-shallow" for f in files)


@pytest.mark.backend_independent
@pytest.mark.parametrize("argv, message", [
    (["--adapter", "lora", "--prompts", "4"], "--prompts do(es) not apply to --adapter lora"),
    (["--adapter", "vpt-deep", "--rank", "4"], "--rank do(es) not apply to --adapter vpt-deep"),
    (["--rank", "4"], "--rank set(s) an adapter's size, and no --adapter is given"),
    (["--adapter", "lora", "--lora-rank", "4"], "--lora-rank R is --adapter lora --rank R"),
    (["--adapter", "vpt-shallow", "--max-num-patches", "16"], "cannot go with NaFlex"),
    (["--adapter", "qlora"], "--adapter must be one of lora, dora, vpt-shallow, vpt-deep, head"),
    (["--adapter", "head", "--rank", "4"], "--rank do(es) not apply to --adapter head: it trains the head alone"),
])
def test_bad_adapter_flags_are_refused_by_name(argv, message, tmp_path, capsys):
    from helpers import fails

    fails(["finetune", "--workdir", str(tmp_path / "run"), *argv], capsys, message)
    assert not (tmp_path / "run").exists()
