"""Throughput of keras_vit against keras-hub's ViT and Hugging Face's ViT.

For each model, image size, batch size, backend and mode (inference / train)
it measures images per second (median of several timed runs after warm-up),
peak memory and the time to the first result (build + compile + first batch),
for keras_vit, keras-hub's ``ViTImageClassifier`` (same backend, same
architecture) and Hugging Face's ``ViTForImageClassification`` on torch (sdpa,
eager and ``torch.compile``). Every measurement runs in its own child process
(``--child``), and the implementations are interleaved per configuration and
per round so that the machine's drift hits all alike. The machine's matrix
multiply peak is measured in the same run; each result is also given as a
fraction of it. ``--dtype int8`` (``int4``, ``float8``) times the Keras
models after ``model.quantize``; ``--runtime onnxruntime,openvino`` times
keras_vit's float32 and int8 exports (`ViT.export`) in those runtimes beside
them, and every quantized route's top-1 agreement with the float32 Keras
model. ``--naflex`` adds keras_vit's NaFlex model (`ViT.with_naflex`) in
inference at a budget of the fixed model's patches (196 for B/16 at 224 px),
its sequences full or half full, beside the fixed model. See
benchmarks/README.md.

    python benchmarks/throughput.py --quick --json benchmarks/results/latest.json
"""

import argparse
import gc
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IMPLS = ("keras_vit", "keras_hub", "hf")
HF_VARIANTS = ("sdpa", "eager", "sdpa+compile")
# Keras's quantization modes (`model.quantize`), timed in inference, and every dtype a row has.
QUANTIZED_DTYPES = ("int8", "int4", "float8")
DTYPES = ("float32", "bfloat16", *QUANTIZED_DTYPES)
# The runtimes of --runtime and the exports each times: (runtime, dtype, quantization).
RUNTIMES = ("onnxruntime", "openvino")
RUNTIME_ROUTES = (("onnxruntime", "float32", None), ("onnxruntime", "int8", "dynamic"),
                  ("onnxruntime", "int8", "static"), ("openvino", "float32", None),
                  ("openvino", "int8", "static"))
# The CPU flags of int8 dot products: VNNI's one-instruction u8 x s8 multiply-add (AVX-512 and
# AVX), and AMX's int8 tiles. Without them a u8 x s8 product goes through vpmaddubsw.
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
INSTALL = {
    "keras_hub": "pip install -r requirements/bench.txt --no-deps  (or: make bench)",
    "hf": "pip install transformers==5.23.0",
}
# NaFlex's rows (--naflex), in the variant slot of keras_vit's inference children: the sequences
# full (square images at the fixed model's size) or half full (images of half its height).
NAFLEX_VARIANTS = ("naflex-full", "naflex-half")
TOME = "tome-"  # a variant "tome-8": ToMe's r=8 (ViT.with_token_merging), keras_vit's or an export's


def tome_r(variant):
    """ToMe's r of a variant (``"tome-8"``, ``"dynamic tome-8"``), 0 without."""
    word = next((w for w in (variant or "").split() if w.startswith(TOME)), None)
    return int(word[len(TOME):]) if word else 0


def with_tome(variant, r):
    """`variant` with ToMe's r (none for r=0): ``("dynamic", 8)`` -> ``"dynamic tome-8"``."""
    return " ".join(part for part in (variant, f"{TOME}{r}" if r else None) if part) or None


def without_tome(variant):
    """`variant` without its ToMe word, None if nothing is left."""
    return " ".join(w for w in (variant or "").split() if not w.startswith(TOME)) or None
RESULT_FIELDS = {
    "impl": str, "backend": str, "model": str, "mode": str, "image_size": int,
    "batch_size": int, "dtype": str, "images_per_s": float, "fraction_of_peak": float,
    "peak_memory_mb": float, "first_call_s": float,
}


# --------------------------------------------------------------------------
# FLOPs, analytically from the config

def _patches(config, image_size):
    """``(grid, patch_inputs)``: the patches per image and the inputs of each
    (p x p x channels; a hybrid's patches are of its ResNet stem's features)."""
    p, channels, stride = config["patch_size"], 3, 1
    if config.get("resnet_block_units") is not None:
        from keras_vit.config import resnet_stride
        units = config["resnet_block_units"]
        width = int(64 * config.get("resnet_width_factor", 1))
        stride = resnet_stride(units)
        channels = width * 2 ** (len(units) - 1) * 4 if units else width
    return (image_size // (p * stride)) ** 2, p * p * channels


def macs_per_image(config, image_size, num_classes=1000, last_block_queries=None):
    """Multiply-adds of one forward pass of the transformer part of a ViT.

    Patch embedding, per block q/k/v (3 N D^2), attention (Q K^T and A V:
    2 N^2 D), output projection (N D^2), MLP (2 N D M), then the head (D C).
    Norms, softmax, GELU and biases are left out. A ResNet stem (hybrids)
    is not counted. The model's FLOPs, the same for every implementation;
    ``last_block_queries=q`` counts instead what an implementation executes
    when its last block updates only ``q`` tokens (keras_vit with token
    pooling: q = 1): keys and values of all N tokens, the rest for q.
    """
    d, m, layers = config["hidden_dim"], config["mlp_dim"], config["num_layers"]
    grid, patch_inputs = _patches(config, image_size)
    tokens = grid + 1  # [class] token
    patch = grid * patch_inputs * d
    def block(q):  # q of the tokens updated, all of them attended to
        return 2 * tokens * d * d + q * (d * d + 2 * tokens * d + d * d + 2 * d * m)
    q = tokens if last_block_queries is None else last_block_queries
    return patch + (layers - 1) * block(tokens) + block(q) + d * num_classes


def model_gemms(config, image_size, batch_size, mode, num_classes=1000):
    """The matrix products of one step of the model: ``{(b, m, k, n): count}``,
    ``b`` products of ``(m, k) @ (k, n)`` each (``b`` 1: a plain matmul).

    Forward, as `macs_per_image` counts it: the patch embedding, per block
    q, k, v and the output projection (``T x D @ D x D``, T = batch x tokens),
    attention's ``Q K^T`` and ``A V`` (batch x heads products of
    ``N x d @ d x N`` and ``N x N @ N x d``), the MLP's two, the head.
    Training adds each product's two gradients (for ``X @ W``: ``dY @ W^T``
    and ``X^T @ dY``, as many FLOPs each). What the GEMMs alone can reach at
    these shapes (`gemm_ceiling`) bounds what any implementation of the
    model can, whatever it does around them. A ResNet stem is left out.
    """
    d, m, heads = config["hidden_dim"], config["mlp_dim"], config["num_heads"]
    grid, patch_inputs = _patches(config, image_size)
    tokens = grid + 1
    rows = batch_size * tokens
    forward = {(1, batch_size * grid, patch_inputs, d): 1, (1, batch_size, d, num_classes): 1}
    per_block = [(1, rows, d, d)] * 4 + [(batch_size * heads, tokens, d // heads, tokens),
                                          (batch_size * heads, tokens, tokens, d // heads),
                                          (1, rows, d, m), (1, rows, m, d)]
    for shape in per_block:
        forward[shape] = forward.get(shape, 0) + config["num_layers"]
    if mode == "inference":
        return forward
    gemms = dict(forward)
    for (b, m_, k, n), count in forward.items():
        for shape in ((b, m_, n, k), (b, k, m_, n)):  # dX = dY W^T, dW = X^T dY
            gemms[shape] = gemms.get(shape, 0) + count
    return gemms


def gemm_flops(gemms):
    return sum(2 * b * m * k * n * count for (b, m, k, n), count in gemms.items())


def _self_check_flops():
    b16 = dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=3072, patch_size=16)
    g = macs_per_image(b16, 224) / 1e9
    assert abs(g - 17.56) < 0.01, f"B/16 at 224 should be 17.56 G multiply-adds, got {g:.3f}"
    for mode, factor in (("inference", 1), ("train", 3)):  # the same FLOPs as the analytic count
        flops = gemm_flops(model_gemms(b16, 224, 8, mode))
        assert flops == 2 * 8 * factor * macs_per_image(b16, 224), (mode, flops)


# --------------------------------------------------------------------------
# Child side: one measurement per process

def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _maxrss_mb():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _gpu_peak_mb(backend):
    """The backend's peak device memory, or None when not on a GPU."""
    if _device(backend) != "gpu":
        return None
    try:
        if backend == "torch":
            import torch
            return torch.cuda.max_memory_allocated() / 2**20
        if backend == "jax":
            import jax
            return jax.devices()[0].memory_stats()["peak_bytes_in_use"] / 2**20
        import tensorflow as tf
        return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20
    except Exception:  # noqa: BLE001 - memory stats are best effort
        return None


def _torch_threads(spec):
    """The same intra-op thread count for every torch child (keras on torch and HF)."""
    import torch
    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    return torch.get_num_threads()


def _memory(backend, rss0):
    """peak_memory_mb: the device peak on a GPU; on CPU (backend None: a
    runtime's child) the child's peak RSS minus its RSS right after the
    imports (both raw numbers kept too)."""
    gpu = _gpu_peak_mb(backend) if backend else None
    peak_rss = _maxrss_mb()
    return {
        "peak_memory_mb": gpu if gpu is not None else max(peak_rss - rss0, 0.0),
        "memory_kind": "device_peak" if gpu is not None else "rss_delta",
        "peak_rss_mb": peak_rss, "rss_after_imports_mb": rss0,
    }


def _timed_runs(step, images_per_step, warmup, runs, steps):
    for _ in range(warmup):
        step()
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        rates.append(images_per_step * steps / (time.perf_counter() - start))
    return statistics.median(rates), rates


def _matmul(f32_accumulate=False):
    """``step(a, b)``: this backend's matmul (jitted on JAX), then one element
    of the product read back, which waits for the device. With
    `f32_accumulate` (JAX only), bfloat16 operands give a float32 product
    rounded back to bfloat16 (``preferred_element_type``): what keras_vit's
    projections run on JAX's CPU, where XLA hands such products to YNNPACK's
    bfloat16 kernels and bf16 -> bf16 ones to Eigen."""
    import keras
    from keras import ops
    if keras.backend.backend() == "jax":
        import jax
        import jax.numpy as jnp
        if f32_accumulate:
            f = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32).astype(x.dtype))
        else:
            f = jax.jit(lambda x, y: x @ y)
    else:
        f = ops.matmul

    def step(a, b):
        y = f(a, b)
        ops.convert_to_numpy(ops.cast(y[(0,) * len(y.shape)], "float32"))
    return step


def _child_matmul(spec):
    import numpy as np
    import keras
    from keras import ops
    backend = keras.backend.backend()
    if backend == "torch":
        _torch_threads(spec)
    n, dtype = spec["n"], spec["dtype"]
    a = ops.cast(ops.convert_to_tensor(np.random.rand(n, n).astype("float32")), dtype)
    b = ops.cast(ops.convert_to_tensor(np.random.rand(n, n).astype("float32")), dtype)
    kernels = {}
    for kernel, matmul in _matmul_kernels(backend, dtype).items():
        rate, _ = _timed_runs(lambda: matmul(a, b), 1, spec["warmup"], spec["runs"], 1)
        kernels[kernel] = 2 * n**3 * rate / 1e9
    device = _device(backend)
    return {"gflops": max(kernels.values()), "kernels": kernels, "device": device}


def _matmul_kernels(backend, dtype):
    """The matmuls timed for the peak: the backend's own, and on JAX in
    bfloat16 also the float32-accumulating one (`_matmul`)."""
    kernels = {"matmul": _matmul()}
    if backend == "jax" and dtype == "bfloat16":
        kernels["matmul_f32_accumulate"] = _matmul(f32_accumulate=True)
    return kernels


def gemm_ceiling(spec, config):
    """This backend's matmul on each of the model's products (`model_gemms`)
    alone, at the spec's dtype: the GFLOP/s of one step's products with
    nothing between them and their operands in cache from the call before,
    the most any implementation on this backend reaches at these shapes.
    Each shape's fastest timed call of any of `_matmul_kernels` counts.
    Measured in keras_vit's child after its timed runs (the same process,
    threads and dtype)."""
    import numpy as np
    import keras
    from keras import ops
    matmuls = list(_matmul_kernels(keras.backend.backend(), spec["dtype"]).values())
    gemms = model_gemms(config, spec["image_size"], spec["batch_size"], spec["mode"])
    rng = np.random.default_rng(0)
    seconds = 0.0
    for (b, m, k, n), count in sorted(gemms.items()):
        lead = (b,) if b > 1 else ()
        x = ops.cast(ops.convert_to_tensor(rng.standard_normal((*lead, m, k), dtype=np.float32)), spec["dtype"])
        w = ops.cast(ops.convert_to_tensor(rng.standard_normal((*lead, k, n), dtype=np.float32)), spec["dtype"])
        times = []
        for matmul in matmuls:
            for i in range(2 + max(spec["runs"], 3)):  # two untimed calls first
                start = time.perf_counter()
                matmul(x, w)
                if i >= 2:
                    times.append(time.perf_counter() - start)
        seconds += count * min(times)
    return gemm_flops(gemms) / seconds / 1e9


def _device(backend):
    """"gpu" when this backend computes on a GPU (the default placement Keras uses), else "cpu"."""
    try:
        if backend == "torch":
            import torch
            return "gpu" if torch.cuda.is_available() else "cpu"
        if backend == "jax":
            import jax
            return "gpu" if jax.devices()[0].platform == "gpu" else "cpu"
        import tensorflow as tf
        return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"
    except Exception:  # noqa: BLE001
        return "cpu"


def _keras_model(spec, config):
    """The child's model: keras_vit's (with the prepared weights when the
    run measures agreement, `_child_prepare`) or keras-hub's, quantized for
    a quantized dtype (`QUANTIZED_DTYPES`: ``model.quantize``)."""
    import keras
    if spec["dtype"] == "bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    size = spec["image_size"]
    if spec["impl"] == "keras_vit":
        model = _keras_vit_model(spec["model"], size, config, naflex_budget(config, size)
                                 if spec.get("variant") in NAFLEX_VARIANTS else None,
                                 token_merging=tome_r(spec.get("variant")))
        if spec.get("prepared"):
            model.load_weights(spec["prepared"]["weights"])
        if spec["dtype"] in QUANTIZED_DTYPES:
            model.quantize(spec["dtype"])
        return model
    import inspect
    import keras_hub
    backbone_args = dict(
        image_shape=(size, size, 3), patch_size=config["patch_size"],
        num_layers=config["num_layers"], num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"], mlp_dim=config["mlp_dim"],
    )
    accepted = inspect.signature(keras_hub.models.ViTBackbone.__init__).parameters
    missing = [k for k in backbone_args if k not in accepted]
    if missing:
        raise TypeError(f"keras_hub {keras_hub.__version__} ViTBackbone lacks {missing}; "
                        f"its signature: {inspect.signature(keras_hub.models.ViTBackbone.__init__)}")
    backbone = keras_hub.models.ViTBackbone(**backbone_args)
    classifier = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=1000, preprocessor=None)
    if spec["dtype"] in QUANTIZED_DTYPES:
        classifier.quantize(spec["dtype"])
    return classifier


def _keras_vit_model(model, size, config, max_num_patches=None, token_merging=0):
    """The preset at `size` px; NaFlex with `max_num_patches`, ToMe with
    `token_merging` (r), each with the same weights."""
    from keras_vit import ViT
    naflex = dict(naflex=True, max_num_patches=max_num_patches) if max_num_patches else {}
    return ViT.from_preset(model, pretrained=False, image_size=size, num_classes=1000,
                           num_layers=config["num_layers"], token_merging=token_merging, **naflex)


def naflex_budget(config, image_size):
    """The NaFlex budget of --naflex: the fixed model's patches at
    `image_size` (196 for a /16 model at 224 px)."""
    return (image_size // config["patch_size"]) ** 2


def naflex_grid(config, image_size, variant):
    """The grid of `variant`'s images (`NAFLEX_VARIANTS`): the fixed model's
    ``(g, g)`` ("naflex-full": every patch valid) or ``(g // 2, g)``
    ("naflex-half": 7x14, 98 patches of 196 at 224 px, the rest padding);
    None where ``g < 2``."""
    grid = image_size // config["patch_size"]
    if variant == "naflex-full":
        return grid, grid
    return (grid // 2, grid) if grid >= 2 else None


def naflex_skip(spec, config):
    """Why a NaFlex child cannot run, or None."""
    if config.get("resnet_block_units") is not None:
        return f"{spec['model']} is a hybrid (ResNet stem): it has no NaFlex form"
    if not naflex_grid(config, spec["image_size"], spec["variant"]):
        return f"a {spec['image_size']} px image is one patch: no half-full sequence"
    return None


def naflex_batch(spec, config):
    """The NaFlex child's batch: `batch_size` random images of `naflex_grid`'s
    size in pixels, cut into sequences of `naflex_budget` patches
    (`keras_vit.naflex_inputs` at their own size, then padded)."""
    import numpy as np
    from keras_vit import naflex_inputs
    p, size = config["patch_size"], spec["image_size"]
    rows, cols = naflex_grid(config, size, spec["variant"])
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (rows * p, cols * p, 3), dtype=np.uint8)
              for _ in range(spec["batch_size"])]
    inputs = naflex_inputs(images, p, rows * cols)
    padding = naflex_budget(config, size) - rows * cols
    return {key: value if key == "spatial_shapes" else
            np.pad(value, [(0, 0), (0, padding)] + [(0, 0)] * (value.ndim - 2))
            for key, value in inputs.items()}


def _keras_optimizer(name):
    """The training step's optimizer, the same for keras_vit and keras-hub.

    ``keras_vit``: the paper's Adam with learning-rate-multiplied weight decay
    (`keras_vit.training.AdamWeightDecay`), which updates through the fused
    training kernels on TensorFlow and PyTorch; ``keras``: Keras's `AdamW`.
    Both with Keras's default weight decay, 0.004.
    """
    import keras
    if name == "keras":
        return keras.optimizers.AdamW(1e-4, weight_decay=0.004)
    from keras_vit.training import AdamWeightDecay
    return AdamWeightDecay(1e-4, weight_decay=0.004)


def _child_keras(spec, config):
    import numpy as np
    import keras
    if spec["impl"] == "keras_vit":
        import keras_vit  # noqa: F401
    else:
        import keras_hub  # noqa: F401
    if spec["mode"] == "train" and spec["optimizer"] == "keras_vit":
        # Imported before the memory baseline and the clock, as the models' packages: its
        # package brings keras_vit's tf.data input pipeline (TensorFlow) on every backend.
        import keras_vit.training  # noqa: F401
    rss0 = _rss_mb()
    backend = keras.backend.backend()
    threads = _torch_threads(spec) if backend == "torch" else None
    b, s = spec["batch_size"], spec["image_size"]
    rng = np.random.default_rng(0)
    # On the device once, as HF's inputs: the timed steps do not copy the batch.
    x = keras.ops.convert_to_tensor(rng.standard_normal((b, s, s, 3), dtype=np.float32))
    naflex = spec.get("variant") in NAFLEX_VARIANTS
    if naflex:
        x = {key: keras.ops.convert_to_tensor(v) for key, v in naflex_batch(spec, config).items()}
    y = keras.ops.convert_to_tensor(rng.integers(0, 1000, (b,)))
    start = time.perf_counter()
    model = _keras_model(spec, config)
    jit = spec.get("jit_compile", "auto")
    if spec["mode"] == "inference":
        model.compile(jit_compile=jit)
        step = lambda: model.predict_on_batch(x)  # noqa: E731
    else:
        model.compile(optimizer=_keras_optimizer(spec["optimizer"]),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)

        def forever():
            while True:
                yield x, y
        batches = forever()

        class StepClock(keras.callbacks.Callback):
            """The time from the end of a fit's first batch to the end of its last.

            The loop's steady state, as in a long epoch: fit's once-per-call
            set-up and tear-down are left out (on TensorFlow a fit of three
            steps of 0.67 s each sometimes took 2.57 s instead of 2.05 s, for
            either model). Reading the loss waits for the step (JAX's
            dispatch is asynchronous).
            """

            def on_train_batch_end(self, batch, logs=None):
                float(logs["loss"])
                now = time.perf_counter()
                self.start = now if batch == 0 else self.start
                self.end = now

        def fit(steps):  # as users train: fit's loop
            # Keras's own fit for both: keras-hub's Task.fit would route these
            # (already preprocessed) batches through tf.data or grain.
            clock = StepClock()
            keras.Model.fit(model, batches, steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[clock])
            return clock.end - clock.start
    if spec["mode"] == "inference":
        step()
        first = time.perf_counter() - start
        rate, rates = _timed_runs(step, b, spec["warmup"], spec["runs"], spec["steps"])
    else:  # one timed run: `steps` batches of one fit(), after its first batch
        keras.Model.fit(model, batches, steps_per_epoch=1, epochs=1, verbose=0)
        first = time.perf_counter() - start
        if spec["warmup"]:
            fit(spec["steps"])
        rates = [b * spec["steps"] / fit(spec["steps"]) for _ in range(spec["runs"])]
        rate = statistics.median(rates)
    out = {
        "images_per_s": rate, "rates": rates, "first_call_s": first, **_memory(backend, rss0),
        "params": int(model.count_params()), "jit_compile": bool(getattr(model, "jit_compile", False)),
        "torch_threads": threads,
    }
    if naflex:
        out.update(max_num_patches=naflex_budget(config, s),
                   valid_patches=int(keras.ops.convert_to_numpy(x["patch_mask"][0]).sum()))
    if spec["impl"] == "keras_vit":  # tokens its last block updates (1: the [class] token alone)
        out["last_block_queries"] = 1 if model.config.pooling == "token" else model.block_tokens()[-1]
        if spec["dtype"] not in QUANTIZED_DTYPES and not naflex and not tome_r(spec.get("variant")):
            # the backend's matmul, this dtype, on the model's own GEMMs
            out["gemm_ceiling_gflops"] = gemm_ceiling(spec, config)
        if spec.get("agreement") and not naflex:
            out["agreement"] = _agreement(
                lambda images: keras.ops.convert_to_numpy(model.predict_on_batch(images)),
                spec["prepared"], b)
    if backend == "jax" and _device("jax") == "gpu":
        out["fused_attention"] = _jax_fused_attention(model, x, spec["mode"] == "train")
    return out


def _jax_fused_attention(model, x, training):
    """Whether XLA compiled the model's attention to cuDNN's fused kernel.

    The model's own forward (and its gradient when training) is compiled and
    its HLO searched for cuDNN's fused multi-head attention custom call.
    """
    import jax
    import jax.numpy as jnp
    trainable = [v.value for v in model.trainable_variables]
    other = [v.value for v in model.non_trainable_variables]

    def loss(trainable, other, x):
        y, _ = model.stateless_call(trainable, other, x, training=training)
        return jnp.sum(y.astype("float32"))

    fn = jax.jit(jax.grad(loss) if training else loss)
    text = fn.lower(trainable, other, x).compile().as_text()
    return "__cudnn$fmha" in text


def _child_hf(spec, config):
    import numpy as np
    import torch
    import transformers
    from transformers import ViTConfig, ViTForImageClassification
    rss0 = _rss_mb()
    threads = _torch_threads(spec)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    b, s = spec["batch_size"], spec["image_size"]
    attn, _, compiled = spec["variant"].partition("+")
    hf_config = ViTConfig(
        hidden_size=config["hidden_dim"], num_hidden_layers=config["num_layers"],
        num_attention_heads=config["num_heads"], intermediate_size=config["mlp_dim"],
        image_size=s, patch_size=config["patch_size"], num_channels=3, num_labels=1000,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((b, 3, s, s), dtype=np.float32)).to(device)
    y = torch.from_numpy(rng.integers(0, 1000, (b,))).to(device)
    autocast = (torch.autocast(device_type=device, dtype=torch.bfloat16)
                if spec["dtype"] == "bfloat16" else torch.autocast(device_type=device, enabled=False))
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    start = time.perf_counter()
    if hasattr(ViTForImageClassification, "_from_config"):
        model = ViTForImageClassification._from_config(hf_config, attn_implementation=attn)
    else:
        hf_config._attn_implementation = attn
        model = ViTForImageClassification(hf_config)
    model = model.to(device)
    params = sum(p.numel() for p in model.parameters())
    forward = torch.compile(model) if compiled else model
    if spec["mode"] == "inference":
        model.eval()

        def step():
            with torch.inference_mode(), autocast:
                forward(pixel_values=x).logits
            sync()
    else:
        model.train()
        # torch's fused kernel where the Keras models use keras_vit's (--optimizer).
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4,
                                      fused=spec["optimizer"] == "keras_vit")

        def step():
            with autocast:
                loss = torch.nn.functional.cross_entropy(forward(pixel_values=x).logits, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync()
    try:
        step()
    except Exception as error:  # noqa: BLE001 - a failing torch.compile is a result
        if compiled:
            return {"skipped": f"torch.compile failed: {type(error).__name__}: {str(error)[:300]}"}
        raise
    first = time.perf_counter() - start
    rate, rates = _timed_runs(step, b, spec["warmup"], spec["runs"], spec["steps"])
    return {
        "images_per_s": rate, "rates": rates, "first_call_s": first, **_memory("torch", rss0),
        "params": int(params), "transformers": transformers.__version__, "torch_threads": threads,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }


def _agreement(predict, prepared, batch_size):
    """The fraction of the prepared agreement images (`_child_prepare`)
    whose top-1 class under ``predict(images) -> logits`` is the float32
    Keras model's, in batches of `batch_size`."""
    import numpy as np
    images = np.load(prepared["images"])
    reference = np.load(prepared["logits"]).argmax(-1)
    classes = np.concatenate([np.asarray(predict(images[i:i + batch_size])).argmax(-1)
                              for i in range(0, len(images), batch_size)])
    return float(np.mean(classes == reference))


def _child_prepare(spec, config):
    """Once per model and image size, before the rounds, on one backend: the
    keras_vit model with seeded random weights (its zero-initialized head
    given random weights, so that its classes differ from image to image)
    saved for every keras_vit child, the float32 logits of the agreement
    images (the digits' test split at the image size, in [-1, 1]), and with
    `spec["runtimes"]` the exports the runtimes' children time: float32 ONNX
    (`ViT.export`), int8 ONNX dynamic and static (calibrated on the digits'
    train split), and for OpenVINO the float32 ONNX converted and the int8
    export. Returns the files' paths and each export's seconds."""
    import numpy as np
    import keras
    folder, size = spec["folder"], spec["image_size"]

    def digits(split, count):
        if not _has_module("tensorflow"):  # keras_vit.data is tf.data; the same images in numpy
            return _digits_without_tensorflow(split, count, size)
        from keras_vit import data as vit_data
        batches = vit_data.input_pipeline("digits", split=split, image_size=size, batch_size=count,
                                          training=False)
        return next(iter(batches))[0].numpy()
    keras.utils.set_random_seed(0)
    model = _keras_vit_model(spec["model"], size, config)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.05, head.kernel.shape).astype("float32"))
    paths = {"weights": os.path.join(folder, "model.weights.h5"), "images": os.path.join(folder, "agreement.npy"),
             "logits": os.path.join(folder, "logits.npy")}
    model.save_weights(paths["weights"])
    images = digits("test", spec["agreement_images"])
    np.save(paths["images"], images)
    np.save(paths["logits"], keras.ops.convert_to_numpy(model.predict(images, batch_size=8, verbose=0)))
    exports, seconds = {}, {}
    if spec["runtimes"]:
        calibration = digits("train", spec["calibration_images"])
        for r in spec.get("token_merging") or [0]:  # ToMe's r: the same weights, merging
            merging = model.with_token_merging(r)
            float_onnx = os.path.join(folder, f"float32_r{r}.onnx")
            for runtime, dtype, quantization in RUNTIME_ROUTES:
                if runtime not in spec["runtimes"]:
                    continue
                route = _route(runtime, dtype, with_tome(quantization, r))
                path = os.path.join(folder, route.replace(" ", "_") + (".xml" if runtime == "openvino" else ".onnx"))
                start = time.perf_counter()
                if runtime == "onnxruntime" and dtype == "float32":
                    merging.export(float_onnx, format="onnx", verbose=False)
                    path = float_onnx
                elif runtime == "openvino" and dtype == "float32":  # the same graph as onnxruntime's
                    import openvino
                    if not os.path.exists(float_onnx):
                        merging.export(float_onnx, format="onnx", verbose=False)
                    openvino.save_model(openvino.convert_model(float_onnx), path, compress_to_fp16=False)
                else:
                    merging.export(path, format="onnx" if runtime == "onnxruntime" else "openvino",
                                   quantize="int8",
                                   calibration_images=calibration if quantization == "static" else None)
                exports[route], seconds[route] = path, time.perf_counter() - start
    return {**paths, "exports": exports, "export_s": seconds}


def _bilinear(images, size):
    """``tf.image.resize(images, (size, size), "bilinear")`` in numpy for an
    upscale (half-pixel centres, edges clamped, no antialiasing): float32
    (n, h, w, c) -> (n, size, size, c)."""
    import numpy as np
    for axis in (1, 2):
        n = images.shape[axis]
        x = np.clip((np.arange(size, dtype=np.float32) + 0.5) * np.float32(n / size) - 0.5, 0, n - 1)
        low = np.floor(x).astype(int)
        high = np.minimum(low + 1, n - 1)
        shape = [1, 1, 1, 1]
        shape[axis] = size
        w = (x - low).astype(np.float32).reshape(shape)
        images = np.take(images, low, axis) * (1 - w) + np.take(images, high, axis) * w
    return images.astype(np.float32)


def _digits_without_tensorflow(split, count, size):
    """The first `count` images of the digits' `split` ("train" or "test") at
    `size` in [-1, 1], as ``keras_vit.data.input_pipeline("digits", ...,
    training=False)`` gives them, for a machine without TensorFlow:
    scikit-learn's digits upscaled to 32 px, rounded to uint8 and split by
    the same permutation (`keras_vit.data.sources`), then resized and scaled."""
    import numpy as np
    from sklearn.datasets import load_digits
    loaded = load_digits()
    images = _bilinear(loaded.images[..., None].astype("float32") * (255.0 / 16.0), 32)
    images = np.repeat(np.clip(np.round(images), 0, 255).astype("uint8"), 3, axis=-1)
    order = np.random.default_rng(0).permutation(len(images))
    rows = order[:-360] if split == "train" else order[-360:]
    return _bilinear(images[rows[:count]].astype("float32"), size) / 127.5 - 1.0


def _route(runtime, dtype, quantization):
    """A runtime route's name: ``"onnxruntime int8 dynamic"``."""
    return " ".join(part for part in (runtime, dtype, quantization) if part)


def _runtime_predict(runtime, path, threads):
    """``predict(images) -> logits`` of the exported model at `path` in
    `runtime` on the CPU with `threads` threads: an onnxruntime session, or
    OpenVINO's CPU plugin at float32 precision (its default on a CPU with
    bfloat16 units is bfloat16) for the parts that are not int8."""
    if runtime == "onnxruntime":
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return lambda images: session.run(None, {name: images})[0]
    import openvino
    compiled = openvino.Core().compile_model(path, "CPU", {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"})
    return lambda images: compiled(images)[0]


def _child_runtime(spec):
    """One runtime route on the Keras children's batch: loading the
    exported model into its runtime (onnxruntime's ``InferenceSession``,
    OpenVINO's compiled model) and the first batch, then the timed runs;
    its agreement in the first round."""
    import numpy as np
    rss0 = _rss_mb()
    b, s = spec["batch_size"], spec["image_size"]
    x = np.random.default_rng(0).standard_normal((b, s, s, 3), dtype=np.float32)  # as _child_keras's
    start = time.perf_counter()
    predict = _runtime_predict(spec["impl"], spec["path"], spec["threads"])
    predict(x)
    first = time.perf_counter() - start
    rate, rates = _timed_runs(lambda: predict(x), b, spec["warmup"], spec["runs"], spec["steps"])
    out = {"images_per_s": rate, "rates": rates, "first_call_s": first, **_memory(None, rss0)}
    if spec.get("agreement"):
        out["agreement"] = _agreement(predict, spec["prepared"], b)
    return out


def child(spec):
    if spec["kind"] == "matmul":
        out = _child_matmul(spec)
    else:
        from keras_vit.presets import PRESETS, count_params, preset_name
        config = dict(PRESETS[preset_name(spec["model"])]["config"])  # the Table 1 row
        config["num_layers"] = spec.get("num_layers") or config["num_layers"]  # --num-layers
        if spec["impl"] != "keras_vit" and config.get("resnet_block_units") is not None:
            print("RESULT " + json.dumps({"skipped": f"{spec['model']} is a hybrid (ResNet stem): "
                                          f"{spec['impl']} has no equivalent"}), flush=True)
            return
        if spec["kind"] == "prepare":
            print("RESULT " + json.dumps(_child_prepare(spec, config)), flush=True)
            return
        if spec.get("variant") in NAFLEX_VARIANTS and naflex_skip(spec, config):
            print("RESULT " + json.dumps({"skipped": naflex_skip(spec, config)}), flush=True)
            return
        if spec["impl"] in RUNTIMES:
            out = _child_runtime(spec)
        else:
            out = _child_hf(spec, config) if spec["impl"] == "hf" else _child_keras(spec, config)
        out["expected_params"] = count_params(**{**config, "image_size": spec["image_size"]})
        out.setdefault("params", out["expected_params"])  # an exported model: keras_vit's
        out["macs_per_image"] = macs_per_image(config, spec["image_size"])
        out["executed_macs_per_image"] = macs_per_image(
            config, spec["image_size"], last_block_queries=out.get("last_block_queries"))
        out["hybrid"] = config.get("resnet_block_units") is not None
    print("RESULT " + json.dumps(out), flush=True)


# --------------------------------------------------------------------------
# Parent side

def _run_child(spec, backend, timeout, cpu_only=False):
    env = dict(os.environ, KERAS_BACKEND=backend, XLA_PYTHON_CLIENT_PREALLOCATE="false",
               TF_FORCE_GPU_ALLOW_GROWTH="true", TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
    # Its own session, so that a timeout also ends the child's helpers (inductor workers).
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"skipped": f"timed out after {timeout} s (--timeout)"}
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = "\n".join((stderr or stdout).strip().splitlines()[-15:])
    print(f"\n  !! child failed (rc {proc.returncode}): {json.dumps(spec)}\n"
          + "\n".join("     " + line for line in tail.splitlines()), file=sys.stderr)
    last = tail.splitlines()[-1] if tail else f"exit status {proc.returncode}"
    return {"skipped": f"child failed: {last[:300]}"}


def _has_module(name):
    import importlib.util
    return importlib.util.find_spec(name) is not None


def _version(dist):
    from importlib import metadata
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# The instruction sets that decide a CPU's matmul speed and its bfloat16 path.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile",
             "amx_bf16", "amx_int8")
# Process settings that change a run's speed without changing its code: threads, the
# allocator (glibc's thresholds, a preloaded jemalloc or tcmalloc, PyTorch's huge-page
# switch), oneDNN and XLA switches.
# Those set for a run are recorded with its machine; the children inherit them.
SPEED_ENVIRONMENT = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME", "OMP_WAIT_POLICY",
    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "TF_ENABLE_ONEDNN_OPTS", "XLA_FLAGS",
    "ONEDNN_MAX_CPU_ISA", "ONEDNN_DEFAULT_FPMATH_MODE", "LD_PRELOAD",
    "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_ARENA_MAX", "THP_MEM_ALLOC_ENABLE",
)


def cpu_info(text=None):
    """The CPU the benchmark ran on, from ``/proc/cpuinfo`` (or `text`):
    its model name, vendor, family and model numbers, the ISA flags of
    `ISA_FLAGS` it has, and a short `kind` naming what matters for speed
    ("AVX2", "AVX-512 with avx512_bf16", "AVX-512 with AMX")."""
    if text is None:
        try:
            with open("/proc/cpuinfo") as f:
                text = f.read()
        except OSError:
            text = ""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first processor's block is enough
            continue
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    isa = [flag for flag in ISA_FLAGS if flag in flags]
    kind = ("AVX-512 with AMX" if "amx_bf16" in flags
            else "AVX-512 with avx512_bf16" if "avx512_bf16" in flags
            else "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "other")
    def number(key):
        return int(fields[key]) if fields.get(key, "").isdigit() else None
    return {"model_name": fields.get("model name") or platform.processor() or platform.machine(),
            "vendor": fields.get("vendor_id"), "family": number("cpu family"),
            "model": number("model"), "isa": isa, "kind": kind}


def int8_features(info):
    """The CPU's int8 dot-product flags (`INT8_FLAGS`) of `cpu_info`'s result."""
    return [flag for flag in INT8_FLAGS if flag in info.get("isa", [])]


def int8_line(info):
    """One line naming the CPU's int8 dot-product flags, each yes or no."""
    have = int8_features(info)
    return ("int8: " + ", ".join(f"{flag} {'yes' if flag in have else 'no'}" for flag in INT8_FLAGS)
            + ("" if have else " (u8 x s8 products through AVX2's vpmaddubsw)"))


def rotated(items, r):
    """Round `r`'s order of `items`: from its `r`-th (modulo its length) on,
    then the ones before, so each round starts one later and drift between
    rounds hits all alike."""
    shift = r % len(items) if items else 0
    return items[shift:] + items[:shift]


def training_steps_by_round(models, images, labels, warmup, runs, rounds):
    """``{name: [seconds per step, one per round]}`` of ``train_on_batch(images,
    labels)`` for each compiled model of `models` (a dict), after `warmup`
    steps of each: every round times `runs` steps of each model in turn,
    the order reversed every other round."""
    for model in models.values():
        for _ in range(warmup):
            model.train_on_batch(images, labels)
    seconds = {name: [] for name in models}
    for r in range(rounds):
        for name in (list(models) if r % 2 == 0 else list(models)[::-1]):
            start = time.perf_counter()
            for _ in range(runs):
                models[name].train_on_batch(images, labels)
            seconds[name].append((time.perf_counter() - start) / runs)
    return seconds


def speed_environment(environ=None):
    """``{name: value}`` of the `SPEED_ENVIRONMENT` variables set in `environ`
    (default ``os.environ``)."""
    environ = os.environ if environ is None else environ
    return {name: environ[name] for name in SPEED_ENVIRONMENT if name in environ}


def machine_record(packages=("keras", "tensorflow-cpu", "jax", "torch")):
    """The machine of a run, as a result records it: its CPU (`cpu_info`),
    cores, the versions of `packages` and the speed settings of its
    environment (`speed_environment`)."""
    return {"cpu_info": cpu_info(), "cpu_cores": os.cpu_count(),
            "versions": {name: _version(name) for name in packages}, "environment": speed_environment()}


def keras_result(benchmark, settings):
    """The head of a result of `benchmark` (a script's name) run on this
    process's Keras backend: ``{"benchmark", "date", "machine", "backend",
    "settings"}``; its machine line printed with the backend."""
    import keras

    machine = machine_record()
    print(machine_line(machine) + f"; KERAS_BACKEND={keras.backend.backend()}", flush=True)
    return {"benchmark": benchmark, "date": time.strftime("%Y-%m-%d"), "machine": machine,
            "backend": keras.backend.backend(), "settings": settings}


def machine_line(machine):
    """One line naming the machine of a run: CPU, its family and ISA, cores, packages, and
    the speed settings of its environment when any is set."""
    info = machine.get("cpu_info") or {}
    versions = machine.get("versions", {})
    packages = ", ".join(f"{name} {versions[name]}" for name in
                         ("tensorflow-cpu", "tensorflow", "jax", "torch", "keras", "keras-hub")
                         if versions.get(name))
    return (f"machine: {info.get('model_name', machine.get('cpu'))} (family {info.get('family')}, "
            f"model {info.get('model')}; {info.get('kind')}: {' '.join(info.get('isa', []))}), "
            f"{machine.get('cpu_cores')} cores" + (f", GPU {machine['gpu']}" if machine.get("gpu") else "")
            + f"; {packages}"
            + "".join(f"; {name}={value}" for name, value in machine.get("environment", {}).items()))


def _gpu_name():
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return out.splitlines()[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def validate(doc):
    """Checks the output against the documented schema; raises ValueError."""
    import math

    def need(cond, what):
        if not cond:
            raise ValueError(f"benchmark JSON does not follow the schema: {what}")
    need(isinstance(doc, dict) and isinstance(doc.get("machine"), dict), "machine object")
    machine = doc["machine"]
    need(isinstance(machine.get("matmul_gflops"), float) and machine["matmul_gflops"] > 0,
         "machine.matmul_gflops positive float")
    need(isinstance(machine.get("matmul_gflops_by_backend"), dict)
         and all(isinstance(v, float) for v in machine["matmul_gflops_by_backend"].values()),
         "machine.matmul_gflops_by_backend {backend: float}")
    by_kernel = machine.get("matmul_gflops_by_kernel", {})
    need(isinstance(by_kernel, dict) and all(
        isinstance(k, dict) and all(isinstance(v, float) for v in k.values()) for k in by_kernel.values()),
        "machine.matmul_gflops_by_kernel {backend: {kernel: float}}")
    environment = machine.get("environment", {})
    need(isinstance(environment, dict) and set(environment) <= set(SPEED_ENVIRONMENT)
         and all(isinstance(v, str) for v in environment.values()),
         f"machine.environment {{name: str}}, names of {SPEED_ENVIRONMENT}")
    need(isinstance(doc.get("results"), list), "results list")
    for i, r in enumerate(doc["results"]):
        need(isinstance(r, dict), f"results[{i}] object")
        for key, kind in RESULT_FIELDS.items():
            need(isinstance(r.get(key), kind) and not isinstance(r.get(key), bool),
                 f"results[{i}].{key} is {type(r.get(key)).__name__}, want {kind.__name__}")
            if kind is float:
                need(math.isfinite(r[key]) and r[key] >= 0, f"results[{i}].{key} = {r[key]!r}")
        need(r["images_per_s"] > 0, f"results[{i}].images_per_s > 0")
        need(r["impl"] in IMPLS + RUNTIMES, f"results[{i}].impl {r['impl']!r}")
        need(r["mode"] in ("inference", "train"), f"results[{i}].mode {r['mode']!r}")
        need(r["dtype"] in DTYPES, f"results[{i}].dtype {r['dtype']!r}")
        need(r.get("quantization") in (("dynamic", "static") if r["impl"] in RUNTIMES and r["dtype"] == "int8"
                                       else (None,)), f"results[{i}].quantization (int8 runtimes only)")
        for key in ("agreement", "vs_keras_float32", "vs_fixed", "vs_r0"):
            need(key not in r or isinstance(r[key], float) and math.isfinite(r[key]) and r[key] >= 0,
                 f"results[{i}].{key} = {r.get(key)!r}")
        need(r["backend"] in ("tensorflow", "jax", "torch"), f"results[{i}].backend {r['backend']!r}")
        need("naflex" not in r or (r["naflex"] in ("full", "half") and r["impl"] == "keras_vit"
                                   and r["mode"] == "inference"
                                   and 0 < r.get("valid_patches", 0) <= r.get("max_num_patches", 0)),
             f"results[{i}].naflex (keras_vit inference: full or half, valid_patches <= max_num_patches)")
        need("vs_fixed" not in r or "naflex" in r, f"results[{i}].vs_fixed (NaFlex rows only)")
        need("token_merging" not in r or (isinstance(r["token_merging"], int) and r["token_merging"] > 0
                                          and r["impl"] in ("keras_vit", *RUNTIMES) and r["mode"] == "inference"),
             f"results[{i}].token_merging (keras_vit and runtimes in inference: ToMe's r > 0)")
        need("vs_r0" not in r or "token_merging" in r, f"results[{i}].vs_r0 (ToMe rows only)")
        need((r.get("variant") in HF_VARIANTS) if r["impl"] == "hf" else "variant" not in r,
             f"results[{i}].variant (hf only, one of {HF_VARIANTS})")


def _ints(text):
    return [int(v) for v in str(text).split(",") if v]


def _names(text):
    return [v.strip() for v in str(text).split(",") if v.strip()]


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=None, help="comma-separated presets (default vit_ti16,vit_s16,vit_b16; "
                   "--quick: vit_ti16)")
    p.add_argument("--batch-size", default=None, help="int or comma list (default 16 on CPU, 128 on GPU; "
                   "--quick: 8, 32 on GPU)")
    p.add_argument("--image-size", default=None, help="int or comma list (default 224, --quick 112)")
    p.add_argument("--backends", default="tensorflow,jax,torch")
    p.add_argument("--modes", default="inference,train")
    p.add_argument("--impls", default=",".join(IMPLS), help="which of keras_vit,keras_hub,hf to run")
    p.add_argument("--hf-variants", default=",".join(HF_VARIANTS))
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="auto: a GPU wherever a backend computes on one (its matmul child says); gpu: stop "
                   "if none does; cpu: hide the GPUs from the children")
    p.add_argument("--dtype", default="auto", help="comma-separated of float32, bfloat16 (mixed), and int8, "
                   "int4, float8 (Keras's model.quantize, inference only); auto: float32,bfloat16 on a backend "
                   "that computes on a GPU, float32 on CPU")
    p.add_argument("--runtime", default="", help="comma-separated of onnxruntime, openvino: keras_vit's "
                   "float32 and int8 exports (ViT.export(..., quantize='int8')) timed in these runtimes on "
                   "the CPU beside the Keras models (inference), with each quantized route's top-1 agreement")
    p.add_argument("--export-backend", choices=("tensorflow", "jax", "torch"), default=None,
                   help="the backend the exports (and the agreement's float32 logits) come from (default "
                   "torch when it runs, else the first of --backends)")
    p.add_argument("--agreement-images", type=int, default=64, help="held-out digits (at the image size) "
                   "of the top-1 agreement with the float32 Keras model (default 64)")
    p.add_argument("--calibration-images", type=int, default=64, help="training digits the static int8 "
                   "exports are calibrated on (default 64)")
    p.add_argument("--naflex", action="store_true", help="also keras_vit's NaFlex model in inference "
                   "(ViT.with_naflex) at a budget of the fixed model's patches (196 for B/16 at 224 px), "
                   "on the fixed model's square images (sequences full) and on images of half their "
                   "height (7x14 patches at 224 px: half full), with its rate over the fixed model's")
    p.add_argument("--token-merging", default="0", metavar="R[,R...]",
                   help="ToMe's r values (ViT.with_token_merging: r tokens merged in every block, the "
                   "same weights) for keras_vit's models and the runtimes' exports in inference, each "
                   "row with its rate over r=0's (/r0) and, with --runtime, its top-1 agreement with "
                   "the float32 model at r=0 (default 0: none)")
    p.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto",
                   help="Keras compile(jit_compile=...) for keras_vit and keras-hub (default auto, "
                   "what Keras users get: XLA on jax, on tensorflow with a GPU; never on torch)")
    p.add_argument("--optimizer", choices=("keras_vit", "keras"), default="keras_vit",
                   help="training's AdamW for keras_vit and keras-hub alike: keras_vit's AdamWeightDecay "
                   "(fused kernels on tensorflow and torch; HF gets torch's fused AdamW) or Keras's AdamW "
                   "(default keras_vit)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads for every torch child (default: all cores)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved repetitions of every child "
                   "(default 2, --quick 1); the result is the median over rounds")
    p.add_argument("--warmup", type=int, default=None, help="untimed batches after the first (default 3, "
                   "--quick 2)")
    p.add_argument("--runs", type=int, default=None, help="timed runs per child, median (default 5, --quick 3)")
    p.add_argument("--steps", type=int, default=None, help="batches per timed run (default 5, --quick 2; on a GPU 20, --quick 8)")
    p.add_argument("--matmul-size", type=int, default=None, help="default 4096 (--quick 2048)")
    p.add_argument("--timeout", type=int, default=None, help="seconds per child (default 1200, --quick 300)")
    p.add_argument("--num-layers", type=int, default=None, metavar="N",
                   help="every model cut to its first N blocks (default: the preset's): a check "
                   "of the harness that compiles in seconds, not a measurement of the presets")
    p.add_argument("--json", metavar="PATH", default=None)
    p.add_argument("--quick", action="store_true", help="a run of a few minutes: vit_ti16, 112 px, batch 8, "
                   "one round, fewer runs")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        gc.freeze()  # its result is out: nothing for the interpreter's shutdown to collect (1-2 s a child)
        return 0
    _self_check_flops()
    q = args.quick
    gpu = _gpu_name() if args.device != "cpu" else None
    if args.device == "gpu" and not gpu:
        sys.exit("--device gpu: nvidia-smi finds no GPU")
    cpu_only = args.device == "cpu"
    models = _names(args.models or ("vit_ti16" if q else "vit_ti16,vit_s16,vit_b16"))
    sizes = _ints(args.image_size or (112 if q else 224))
    backends = _names(args.backends)
    modes = _names(args.modes)
    impls = [i for i in _names(args.impls) if i in IMPLS]
    variants = [v for v in _names(args.hf_variants) if v in HF_VARIANTS]
    dtypes = _names(args.dtype) if args.dtype != "auto" else None  # auto: per backend, by its device
    rounds = args.rounds or (1 if q else 2)
    warmup = args.warmup if args.warmup is not None else (2 if q else 3)
    runs = args.runs or (3 if q else 5)
    timeout = args.timeout or (300 if q else 1200)
    n = args.matmul_size or (2048 if q else 4096)
    threads = args.threads or os.cpu_count()
    jit = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    runtimes = _names(args.runtime)
    merges = _ints(args.token_merging)
    for what, given, known in (("mode", modes, {"inference", "train"}),
                               ("backend", backends, {"tensorflow", "jax", "torch"}),
                               ("dtype", dtypes or [], set(DTYPES)), ("runtime", runtimes, set(RUNTIMES))):
        for bad in set(given) - known:
            sys.exit(f"unknown {what} {bad!r}; known: {', '.join(sorted(known))}")

    skipped = []
    needs = {"keras_hub": "keras_hub", "hf": "transformers"}
    for impl, module in needs.items():
        if impl in impls and not (_has_module(module) and (impl != "hf" or _has_module("torch"))):
            print(f"!! {impl} skipped: {module if _has_module(module) else 'torch'} is not installed. "
                  f"Install: {INSTALL[impl]}", file=sys.stderr)
            skipped.append({"impl": impl, "reason": f"not installed: {INSTALL[impl]}"})
            impls.remove(impl)

    # The matmul peak of every backend that runs something (torch for HF), in
    # every round like the models; the best over rounds counts. The float32
    # child also says whether its backend computes on a GPU.
    peak_backends = list(backends) + (["torch"] if "hf" in impls and "torch" not in backends else [])
    peaks, device = {}, {}  # dtype -> backend -> GFLOP/s; backend -> "cpu" | "gpu"
    kernel_peaks = {}  # dtype -> backend -> kernel -> GFLOP/s

    def backend_dtypes(backend):
        if dtypes:
            return dtypes
        return ["float32", "bfloat16"] if device.get(backend) == "gpu" else ["float32"]

    def measure_peaks(r):
        for backend in peak_backends:
            # float32 first: it finds the device, which decides the other dtypes (auto)
            for dt in ["float32", "other"]:
                if dt == "other":
                    if "bfloat16" not in backend_dtypes(backend):
                        continue
                    dt = "bfloat16"
                spec = {"kind": "matmul", "n": n, "dtype": dt, "warmup": 2, "runs": 5 if q else 10,
                        "threads": threads}
                out = _run_child(spec, backend, timeout, cpu_only)
                if "gflops" in out:
                    best = peaks.setdefault(dt, {})
                    best[backend] = max(best.get(backend, 0.0), out["gflops"])
                    by_kernel = kernel_peaks.setdefault(dt, {}).setdefault(backend, {})
                    for kernel, gflops in out["kernels"].items():
                        by_kernel[kernel] = max(by_kernel.get(kernel, 0.0), gflops)
                    device.setdefault(backend, out["device"])
                    detail = ", ".join(f"{k} {g:.1f}" for k, g in out["kernels"].items())
                    print(f"[{r + 1}/{rounds}] matmul {n}x{n} {dt} on {backend} ({out['device']}): "
                          f"{out['gflops']:.1f} GFLOP/s"
                          + (f" (best of {detail})" if len(out["kernels"]) > 1 else ""), flush=True)
                else:
                    skipped.append({"impl": "matmul", "backend": backend, "dtype": dt, "reason": out["skipped"]})

    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    if load_start > 0.5 * os.cpu_count():
        print(f"!! load average {load_start:.1f} on {os.cpu_count()} cores: other work is running, "
              "the numbers will be noisy (Keras on torch especially)", file=sys.stderr)
    measure_peaks(0)
    on_gpu = sorted(b for b, d in device.items() if d == "gpu")
    if gpu and not on_gpu:
        print(f"!! nvidia-smi finds {gpu}, but no backend here computes on it (CPU builds: tensorflow-cpu, "
              "jax[cpu], torch+cpu); everything runs on the CPU", file=sys.stderr)
        if args.device == "gpu":
            sys.exit("--device gpu: no backend can use the GPU")
    batches = _ints(args.batch_size or ((32 if on_gpu else 8) if q else (128 if on_gpu else 16)))
    steps = args.steps or (((8 if q else 20) if on_gpu else (2 if q else 5)))
    all_dtypes = dtypes or (["float32", "bfloat16"] if on_gpu else ["float32"])

    # Interleaved: for every config, every (backend, impl) child in turn, the
    # order rotated each round, so that drift hits all alike.
    configs = [(m, s, b, mode, dt) for m in models for s in sizes for b in batches for mode in modes
               for dt in all_dtypes]
    units = [(be, impl, None) for be in backends for impl in impls if impl != "hf"]
    if "hf" in impls:
        units += [("torch", "hf", v) for v in variants]

    # The agreement's model, images and float32 logits, and the runtimes' exports: once per
    # model and image size, on one backend (`_child_prepare`).
    export_backend = args.export_backend or ("torch" if "torch" in backends else backends[0])
    prepared, work = {}, None
    if runtimes or set(all_dtypes) & set(QUANTIZED_DTYPES):
        work = tempfile.mkdtemp(prefix="throughput_")
        for model in models:
            for size in sizes:
                folder = os.path.join(work, f"{model}-{size}")
                os.makedirs(folder)
                spec = {"kind": "prepare", "impl": "keras_vit", "model": model, "image_size": size,
                        "folder": folder, "runtimes": runtimes if "inference" in modes else [],
                        "agreement_images": args.agreement_images, "calibration_images": args.calibration_images,
                        "num_layers": args.num_layers, "token_merging": merges}
                print(f"prepare {model} {size}px on {export_backend}: weights, agreement logits"
                      + (", exports" if spec["runtimes"] else "") + " ...", end=" ", flush=True)
                out = _run_child(spec, export_backend, timeout, cpu_only)
                if "skipped" in out:
                    print("skipped: " + out["skipped"], flush=True)
                    skipped.append({"impl": "prepare", "backend": export_backend, "model": model,
                                    "image_size": size, "reason": out["skipped"]})
                    continue
                print(", ".join(f"{route} {seconds:.0f} s" for route, seconds in out["export_s"].items())
                      or "done", flush=True)
                prepared[model, size] = out
    collected = {}
    for r in range(rounds):
        if r:
            measure_peaks(r)
        for model, size, batch, mode, config_dtype in configs:
            here = [(backend, impl, variant, config_dtype) for backend, impl, variant in units]
            if mode == "inference":  # ToMe's r > 0: keras_vit's model merging
                here += [(backend, "keras_vit", with_tome(None, r), config_dtype)
                         for backend in backends if "keras_vit" in impls for r in merges if r]
            if mode == "inference" and config_dtype == all_dtypes[0] and (model, size) in prepared:
                here += [(export_backend, runtime, with_tome(quantization, r), dtype)
                         for r in merges for runtime, dtype, quantization in RUNTIME_ROUTES
                         if _route(runtime, dtype, with_tome(quantization, r)) in prepared[model, size]["exports"]]
            if args.naflex and mode == "inference" and config_dtype not in QUANTIZED_DTYPES:
                here += [(backend, "keras_vit", variant, config_dtype) for backend in backends
                         for variant in NAFLEX_VARIANTS]
            for backend, impl, variant, dt in rotated(here, r):
                key = (impl, variant, backend, model, mode, size, batch, dt)
                if impl not in RUNTIMES and dt not in backend_dtypes(backend) or (
                        key in collected and collected[key] is None):
                    continue  # bfloat16 on a CPU backend, or skipped in an earlier round
                spec = {"kind": "model", "impl": impl, "variant": variant, "model": model,
                        "mode": mode, "image_size": size, "batch_size": batch, "dtype": dt,
                        "warmup": warmup, "runs": runs, "steps": steps, "threads": threads,
                        "jit_compile": jit, "optimizer": args.optimizer,
                        "num_layers": args.num_layers}
                if (model, size) in prepared and impl in ("keras_vit", *RUNTIMES):
                    spec.update(prepared=prepared[model, size], agreement=r == 0)
                if impl in RUNTIMES:
                    spec["path"] = prepared[model, size]["exports"][_route(impl, dt, variant)]
                label = f"[{r + 1}/{rounds}] {impl}{'/' + variant if variant else ''} {backend} {model} " \
                        f"{mode} {size}px bs{batch} {dt}"
                print(label + " ...", end=" ", flush=True)
                if dt in QUANTIZED_DTYPES and impl not in RUNTIMES and (mode == "train" or impl == "hf"):
                    out = {"skipped": f"{dt} is timed in inference, with Keras's model.quantize (not HF's)"}
                else:
                    out = _run_child(spec, backend, timeout, cpu_only)
                if "skipped" in out:
                    print("skipped: " + out["skipped"], flush=True)
                    skipped.append({"impl": impl, "variant": variant, "backend": backend, "model": model,
                                    "mode": mode, "image_size": size, "batch_size": batch, "dtype": dt,
                                    "reason": out["skipped"]})
                    collected[key] = None
                    continue
                print(f"{out['images_per_s']:.1f} img/s, first call {out['first_call_s']:.1f} s, "
                      f"{out['params']:,} params", flush=True)
                if out["params"] != out["expected_params"] and dt not in QUANTIZED_DTYPES:
                    print(f"\n!!!!!! WARNING: {impl} {model} has {out['params']:,} parameters, keras_vit's "
                          f"{out['expected_params']:,}: the architectures differ !!!!!!\n", file=sys.stderr)
                collected.setdefault(key, []).append(out)
    if work:
        shutil.rmtree(work, ignore_errors=True)
    if not peaks.get("float32"):
        sys.exit("no backend could run the float32 matmul peak; see the errors above")

    # The GEMM ceiling of each backend and configuration: the best of keras_vit's children.
    ceilings = {}
    for (impl, _, backend, *config), outs in collected.items():
        for o in outs or []:
            if "gemm_ceiling_gflops" in o:
                key = (backend, *config)
                ceilings[key] = max(ceilings.get(key, 0.0), o["gemm_ceiling_gflops"])

    results = []
    for (impl, variant, backend, model, mode, size, batch, dt), outs in collected.items():
        if not outs:
            continue
        rate = statistics.median(o["images_per_s"] for o in outs)
        flops = 2 * outs[0]["macs_per_image"] * (3 if mode == "train" else 1)
        executed = 2 * outs[0]["executed_macs_per_image"] * (3 if mode == "train" else 1)
        peak_backend = "torch" if impl == "hf" else backend
        # The hardware's peak: the best matmul of any backend on the same device.
        table = peaks.get(dt) or peaks["float32"]
        peak = max((g for b, g in table.items() if device.get(b) == device.get(peak_backend)), default=0.0)
        own_peak = table.get(peak_backend)
        row = {
            "impl": impl, "backend": backend, "model": model, "mode": mode, "image_size": size,
            "batch_size": batch, "dtype": dt, "images_per_s": float(rate),
            "fraction_of_peak": float(rate * flops / (peak * 1e9)) if peak else 0.0,
            "fraction_of_backend_peak": float(rate * flops / (own_peak * 1e9)) if own_peak else 0.0,
            # The hardware's utilization: the FLOPs this implementation executes.
            "executed_fraction_of_peak": float(rate * executed / (peak * 1e9)) if peak else 0.0,
            "peak_memory_mb": float(max(o["peak_memory_mb"] for o in outs)),
            "first_call_s": float(statistics.median(o["first_call_s"] for o in outs)),
            "gflops_per_image": flops / 1e9, "executed_gflops_per_image": executed / 1e9,
            "params": outs[0]["params"],
            "memory_kind": outs[0]["memory_kind"],
            "peak_rss_mb": float(max(o["peak_rss_mb"] for o in outs)),
            "rss_after_imports_mb": float(statistics.median(o["rss_after_imports_mb"] for o in outs)),
            "rounds": len(outs), "images_per_s_by_round": [o["images_per_s"] for o in outs],
            "images_per_s_runs": [o["rates"] for o in outs],
        }
        ceiling = ceilings.get((peak_backend, model, mode, size, batch, dt)) if impl not in RUNTIMES else None
        if ceiling:  # the model's FLOP rate against its own GEMMs alone on this backend
            row.update(gemm_ceiling_gflops=float(ceiling),
                       fraction_of_gemm_ceiling=float(rate * flops / (ceiling * 1e9)),
                       gemm_ceiling_fraction_of_peak=float(ceiling / peak) if peak else 0.0)
        if variant and impl == "hf":
            row["variant"] = variant
        if variant in NAFLEX_VARIANTS:
            row.update(naflex=variant.split("-")[1], max_num_patches=outs[0]["max_num_patches"],
                       valid_patches=outs[0]["valid_patches"])
        if impl in RUNTIMES:  # exported from `backend`
            row["export_s"] = float(prepared[model, size]["export_s"][_route(impl, dt, variant)])
            if without_tome(variant):
                row["quantization"] = without_tome(variant)
        if tome_r(variant):
            row["token_merging"] = tome_r(variant)
        if "agreement" in outs[0]:  # top-1 agreement with the float32 Keras model
            row["agreement"] = outs[0]["agreement"]
        if "jit_compile" in outs[0]:
            row["jit_compile"] = outs[0]["jit_compile"]
        if "fused_attention" in outs[0]:
            row["fused_attention"] = outs[0]["fused_attention"]
        if outs[0].get("attn_implementation"):
            row["attn_implementation"] = outs[0]["attn_implementation"]
        if outs[0]["hybrid"]:
            row["note"] = "hybrid: the ResNet stem's FLOPs are not counted"
        results.append(row)

    # Each rate against the fastest Keras float32 backend (keras_vit's) on the same configuration.
    best_keras = {}
    for row in results:
        if row["impl"] == "keras_vit" and row["dtype"] == "float32" and "naflex" not in row \
                and "token_merging" not in row:
            config = (row["model"], row["image_size"], row["batch_size"], row["mode"])
            best_keras[config] = max(best_keras.get(config, 0.0), row["images_per_s"])
    for row in results:
        best = best_keras.get((row["model"], row["image_size"], row["batch_size"], row["mode"]))
        if best:
            row["vs_keras_float32"] = float(row["images_per_s"] / best)
    add_vs_fixed(results)
    add_vs_r0(results)

    _print_table(results)
    for item in skipped:
        what = " ".join(str(item[k]) for k in ("impl", "variant", "backend", "model", "mode", "image_size",
                                                "batch_size", "dtype") if item.get(k) is not None)
        print(f"skipped: {what}: {item['reason'][:160]}")
    machine = {
        "matmul_gflops": float(max(peaks["float32"].values())),
        "matmul_gflops_by_backend": peaks["float32"],
        "matmul_gflops_by_kernel": kernel_peaks["float32"],
        "matmul_size": n,
        "cpu": cpu_info()["model_name"], "cpu_info": cpu_info(), "int8_features": int8_features(cpu_info()),
        "cpu_cores": os.cpu_count(), "torch_threads": threads, "gpu": gpu,
        "environment": speed_environment(),
        "device_by_backend": device,
        "loadavg_start": load_start, "loadavg_end": os.getloadavg()[0],
        "python": platform.python_version(), "platform": platform.platform(),
        "versions": {d: _version(d) for d in ("keras", "keras-vision-transformer", "tensorflow",
                                              "tensorflow-cpu", "jax", "jaxlib", "torch", "keras-hub",
                                              "transformers", "numpy", "onnx", "onnxruntime", "openvino")},
    }
    if peaks.get("bfloat16"):
        machine["matmul_gflops_bf16_by_backend"] = peaks["bfloat16"]
        machine["matmul_gflops_bf16_by_kernel"] = kernel_peaks["bfloat16"]
    doc = {"machine": machine, "results": results, "skipped": skipped,
           "settings": {"rounds": rounds, "warmup": warmup, "runs": runs, "steps": steps, "quick": q,
                        "dtypes": all_dtypes, "jit_compile": args.jit_compile, "device": args.device,
                        "optimizer": args.optimizer, "num_layers": args.num_layers, "runtimes": runtimes,
                        "naflex": args.naflex, "token_merging": merges,
                        "export_backend": export_backend if prepared else None,
                        "agreement_images": args.agreement_images if prepared else None,
                        "calibration_images": args.calibration_images if runtimes else None,
                        "wall_s": round(time.perf_counter() - started, 1)}}
    validate(doc)
    print(machine_line(machine))
    print(int8_line(machine["cpu_info"]))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"JSON written: {args.json} ({len(results)} results, {len(skipped)} skipped)")
    print(f"wall time {time.perf_counter() - started:.0f} s")
    return 0


def add_vs_fixed(results):
    """Each NaFlex row's rate over the fixed model's (keras_vit) on the same
    backend, model, size, batch and dtype: ``vs_fixed``."""
    def key(r):
        return (r["backend"], r["model"], r["image_size"], r["batch_size"], r["mode"], r["dtype"])
    fixed = {key(r): r["images_per_s"] for r in results
             if r["impl"] == "keras_vit" and "naflex" not in r and "token_merging" not in r}
    for row in results:
        if "naflex" in row and key(row) in fixed:
            row["vs_fixed"] = float(row["images_per_s"] / fixed[key(row)])


def add_vs_r0(results):
    """Each ToMe row's rate over the same route's without merging (r=0):
    ``vs_r0``."""
    def key(r):
        return (r["impl"], r["backend"], r["model"], r["image_size"], r["batch_size"], r["mode"],
                r["dtype"], r.get("quantization"), r.get("naflex"))
    plain = {key(r): r["images_per_s"] for r in results if "token_merging" not in r}
    for row in results:
        if "token_merging" in row and key(row) in plain:
            row["vs_r0"] = float(row["images_per_s"] / plain[key(row)])


def _print_table(results):
    """One row per result, grouped by configuration; the ratios on keras_vit's rows."""
    def key(r):
        return (r["model"], r["image_size"], r["batch_size"], r["mode"], r["dtype"])
    hub = {(key(r), r["backend"]): r["images_per_s"] for r in results if r["impl"] == "keras_hub"}
    hf = {}
    for r in results:
        if r["impl"] == "hf":
            hf[key(r)] = max(hf.get(key(r), 0.0), r["images_per_s"])
    rows = []
    # Per configuration: keras_vit then keras-hub on each backend, then the HF variants, then the runtimes.
    for r in sorted(results, key=lambda r: (key(r), r["impl"] in RUNTIMES, r["impl"] == "hf", r["backend"],
                                            r["impl"] != "keras_vit", r["impl"], r.get("naflex") or "",
                                            r.get("variant") or "",
                                            r.get("quantization") or "", r.get("token_merging", 0))):
        vs_hub = vs_hf = ""
        if r["impl"] == "keras_vit" and "naflex" not in r:
            if (key(r), r["backend"]) in hub:
                vs_hub = f"{r['images_per_s'] / hub[(key(r), r['backend'])]:.3g}"
            if hf.get(key(r)):
                vs_hf = f"{r['images_per_s'] / hf[key(r)]:.3g}"
        runs = [v for round_runs in r["images_per_s_runs"] for v in round_runs]
        rows.append([r["impl"] + ("/" + r["variant"] if r.get("variant") else "")
                     + (f" naflex {r['naflex']} {r['valid_patches']}/{r['max_num_patches']}"
                        if r.get("naflex") else "")
                     + (" " + r["quantization"] if r.get("quantization") else "")
                     + (f" r={r['token_merging']}" if r.get("token_merging") else ""), r["backend"], r["model"],
                     r["mode"], str(r["image_size"]), str(r["batch_size"]), r["dtype"],
                     f"{r['images_per_s']:.1f}", f"{min(runs):.1f}-{max(runs):.1f}",
                     f"{100 * r['fraction_of_peak']:.1f}%", f"{100 * r['executed_fraction_of_peak']:.1f}%",
                     f"{100 * r['fraction_of_gemm_ceiling']:.1f}%" if "gemm_ceiling_gflops" in r else "",
                     f"{100 * r['gemm_ceiling_fraction_of_peak']:.1f}%" if "gemm_ceiling_gflops" in r else "",
                     f"{r['peak_memory_mb']:.0f}", f"{r['first_call_s']:.1f}", vs_hub, vs_hf,
                     f"{r['vs_keras_float32']:.2f}" if "vs_keras_float32" in r else "",
                     f"{100 * r['agreement']:.1f}%" if "agreement" in r else "",
                     f"{r['vs_fixed']:.3f}" if "vs_fixed" in r else "",
                     f"{r['vs_r0']:.2f}" if "vs_r0" in r else ""])
    head = ["impl", "backend", "model", "mode", "img", "bs", "dtype", "img/s", "runs", "%peak", "%exec",
            "%gemm", "gemm%pk", "peakMB", "first_s", "/hub", "/HF", "/kf32", "top1", "/fixed", "/r0"]
    right = {"img", "bs", "img/s", "runs", "%peak", "%exec", "%gemm", "gemm%pk", "peakMB", "first_s", "/hub",
             "/HF", "/kf32", "top1", "/fixed", "/r0"}
    widths = [max(len(row[i]) for row in rows + [head]) for i in range(len(head))]

    def line(cells):
        return "  ".join(c.rjust(w) if h in right else c.ljust(w) for c, w, h in zip(cells, widths, head))
    print("\n" + line(head) + "\n" + "-" * len(line(head)))
    for row in rows:
        print(line(row).rstrip())
    print("img/s: median over rounds; runs: the slowest and fastest timed run (this machine's spread);\n"
          "%peak: the model's FLOPs per second / the matmul peak; %exec: the FLOPs the implementation executes\n"
          "(keras_vit's last block updates only the [class] token under token pooling);\n"
          "%gemm: the model's FLOPs per second / its own matrix products alone on this backend (the GEMM\n"
          "ceiling: the most any implementation reaches there); gemm%pk: that ceiling / the matmul peak;\n"
          "/hub: keras_vit / keras-hub on the same backend; /HF: keras_vit / the fastest HF variant (torch);\n"
          "/kf32: the rate / the fastest Keras float32 backend's (keras_vit); top1: top-1 agreement with the\n"
          "float32 Keras model on the held-out digits (runtimes: exported from the backend named);\n"
          "naflex full|half v/n: keras_vit's NaFlex model, v valid patches of its budget n per image;\n"
          "/fixed: its rate / the fixed keras_vit model's on the same backend and configuration;\n"
          "r=R: ToMe's r tokens merged in every block (--token-merging; %peak and %exec count the FLOPs of\n"
          "the model without merging); /r0: the rate / the same route's without merging.\n")


if __name__ == "__main__":
    sys.exit(main())
