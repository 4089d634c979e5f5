"""What the original code's tanh GELU costs on PyTorch's CPU, measured in one process.

ViT's MLP applies GELU in its tanh form: the original vit_jax code calls flax's
``nn.gelu``, whose default is ``approximate=True``, and keras_vit keeps it
(`ViTConfig.gelu_approximate`). keras-hub's ViT and timm's use the exact (erf)
form. On PyTorch's CPU the two are different kernels of
``torch.nn.functional.gelu``, and the tanh one costs several times the erf one
per element, which shows in the inference speed of the whole model where its
matrix products are fast (bfloat16 on a CPU with bfloat16 units).

Printed, each a ratio of two numbers measured here one after the other:
1. the GELU kernel alone on a B/16 MLP's hidden activations (batch x tokens,
   mlp_dim), tanh form against erf form, per dtype;
2. per mode and dtype, images/s of keras_vit (tanh GELU, the default), of
   keras_vit with ``gelu_approximate=False`` and of keras-hub's ViT (same
   architecture, random weights): ``predict_on_batch`` for inference,
   ``train_on_batch`` with the benchmark's optimizer (keras_vit's
   `AdamWeightDecay`, fused on PyTorch) and cross-entropy for training;
   keras_vit / keras-hub for each form. keras-hub computes the erf form, so
   the erf row compares the same function;
3. with ``--profile-steps N``, per mode and dtype, where each model's step
   goes (``torch.profiler``, each op's own time, ms per step, the mean of N
   steps profiled one model after another in a rotating order):
   the matrix products (``mm``, ``bmm``, ``addmm``, ``baddbmm``), attention
   (PyTorch's ``scaled_dot_product`` kernels), the GELU (forward and
   gradient) and the rest; then keras-hub's step over its products and
   attention, the most any model running those same kernels could gain on
   it, and what a 1.1x target leaves for all the rest of a step.

    KERAS_BACKEND is set to torch here.
    .venv/bin/python benchmarks/gelu_forms.py --dtype float32,bfloat16 --modes inference,train
    .venv/bin/python benchmarks/gelu_forms.py --model vit_s16 --dtype float32 --modes train --profile-steps 2
"""

import argparse
import os

os.environ["KERAS_BACKEND"] = "torch"

from throughput import _keras_model  # noqa: E402  (beside this file: the benchmark's own builders)
from throughput import _keras_optimizer  # noqa: E402
from throughput import _timed_runs  # noqa: E402
from throughput import _version  # noqa: E402
from throughput import cpu_info  # noqa: E402
from throughput import machine_line  # noqa: E402
from throughput import rotated  # noqa: E402


def best_rate(step, per_call, runs):
    """The fastest of `runs` timed calls of `step` after two untimed ones, as
    `per_call` / seconds (`throughput.py`'s timed runs, one call each)."""
    return max(_timed_runs(step, per_call, warmup=2, runs=runs, steps=1)[1])


def gelu_kernels(rows, columns, dtype, runs):
    """Seconds of torch's tanh-form and erf-form GELU on a (rows, columns) tensor."""
    import torch

    x = torch.randn(rows, columns, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    gelu = torch.nn.functional.gelu
    return (1 / best_rate(lambda: gelu(x, approximate="tanh"), 1, runs),
            1 / best_rate(lambda: gelu(x, approximate="none"), 1, runs))


LABELS = {"tanh": "keras_vit tanh GELU", "erf": "keras_vit erf GELU", "hub": "keras-hub"}
CATEGORIES = ("GEMMs", "attention", "GELU", "rest")
GEMMS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")
GELUS = ("aten::gelu", "aten::gelu_backward")


def category(op):
    """The `CATEGORIES` entry of a profiled ATen op's name."""
    if op in GEMMS:
        return "GEMMs"
    if "scaled_dot_product" in op:
        return "attention"
    return "GELU" if op in GELUS else "rest"


def profile(step):
    """ms of one call of `step` by `CATEGORIES`: each op's own (self) CPU
    time under ``torch.profiler``, summed per category."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    ms = dict.fromkeys(CATEGORIES, 0.0)
    for op in prof.key_averages():
        ms[category(op.key)] += op.self_cpu_time_total / 1e3
    return ms


def models(preset, image_size, num_layers, dtype):
    """keras_vit with each GELU form and keras-hub's ViT of the same shape, under
    `dtype`, built as `throughput.py`'s children build them (not compiled)."""
    import keras

    from keras_vit import ViT
    from keras_vit.presets import PRESETS
    from keras_vit.presets import preset_name

    config = dict(PRESETS[preset_name(preset)]["config"])
    config["num_layers"] = num_layers or config["num_layers"]
    spec = dict(model=preset, image_size=image_size, dtype=dtype)
    keras.config.set_dtype_policy("mixed_bfloat16" if dtype == "bfloat16" else "float32")
    tanh = _keras_model({**spec, "impl": "keras_vit"}, config)
    erf = ViT.from_preset(preset, pretrained=False, image_size=image_size, num_classes=1000,
                          num_layers=config["num_layers"], gelu_approximate=False)
    hub = _keras_model({**spec, "impl": "keras_hub"}, config)
    keras.config.set_dtype_policy("float32")
    return tanh, erf, hub


def step_of(model, mode, x, y):
    """`model` compiled for `mode` and its one step: ``predict_on_batch(x)``, or
    ``train_on_batch(x, y)`` with `throughput.py`'s training optimizer and loss."""
    import keras

    if mode == "inference":
        model.compile()
        return lambda: model.predict_on_batch(x)
    model.compile(optimizer=_keras_optimizer("keras_vit"),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return lambda: model.train_on_batch(x, y)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="vit_b16", help="a keras_vit preset (random weights)")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--dtype", default="float32,bfloat16", help="float32, bfloat16 (mixed) or both")
    p.add_argument("--modes", default="inference,train", help="inference, train or both")
    p.add_argument("--runs", type=int, default=5, help="timed calls per measurement; the fastest counts")
    p.add_argument("--rounds", type=int, default=2, help="the three models in turn, this many times, "
                   "each round starting one model later")
    p.add_argument("--num-layers", type=int, default=None, help="cut every model to its first N blocks")
    p.add_argument("--profile-steps", type=int, default=0, help="profile each model over this many steps "
                   "after the timed rounds and print where its step goes (0: no profile)")
    args = p.parse_args(argv)
    modes = args.modes.split(",")
    for mode in set(modes) - {"inference", "train"}:
        p.error(f"unknown mode {mode!r}; known: inference, train")

    import numpy as np
    import torch

    from keras_vit.presets import preset_config

    c = preset_config(args.model, image_size=args.image_size)
    tokens = c.grid_size[0] * c.grid_size[1] + c.num_prefix_tokens
    machine = {"cpu_info": cpu_info(), "cpu_cores": os.cpu_count(),
               "versions": {d: _version(d) for d in ("torch", "keras", "keras-hub")}}
    print(f"{machine_line(machine)}; {torch.get_num_threads()} torch threads")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch_size, args.image_size, args.image_size, 3)).astype("float32")
    y = rng.integers(0, 1000, (args.batch_size,))
    for dtype in args.dtype.split(","):
        tanh_s, erf_s = gelu_kernels(args.batch_size * tokens, c.mlp_dim, dtype, args.runs)
        print(f"{dtype}: torch GELU on ({args.batch_size * tokens}, {c.mlp_dim}): tanh {tanh_s * 1e3:.3f} ms, "
              f"erf {erf_s * 1e3:.3f} ms, tanh / erf {tanh_s / erf_s:.2f}x")
        built = dict(zip(("tanh", "erf", "hub"), models(args.model, args.image_size, args.num_layers, dtype)))
        for mode in modes:
            steps = {name: step_of(model, mode, x, y) for name, model in built.items()}
            rates = {name: [] for name in steps}
            names = list(steps)
            for r in range(args.rounds):
                for name in rotated(names, r):
                    rates[name].append(best_rate(steps[name], args.batch_size, args.runs))
            best = {name: max(r) for name, r in rates.items()}
            call = "predict_on_batch" if mode == "inference" else "train_on_batch"
            rated = ", ".join(f"{LABELS[name]} {best[name]:.1f}" for name in names)
            print(f"{dtype}: {call} img/s, best of {args.rounds} rounds: {rated}; /hub: tanh "
                  f"{best['tanh'] / best['hub']:.2f}x, erf {best['erf'] / best['hub']:.2f}x")
            if args.profile_steps:
                print_profiles(dtype, call, steps, args.profile_steps)


def print_profiles(dtype, call, steps, n):
    """`profile` of each model's step, one step each in turn `n` times, the
    order rotated each time as the timed rounds are; then a line per model
    (the mean) and keras-hub's bound."""
    names = list(steps)
    ms = {name: dict.fromkeys(CATEGORIES, 0.0) for name in names}
    for r in range(n):
        for name in rotated(names, r):
            for c, value in profile(steps[name]).items():
                ms[name][c] += value / n
    for name in names:
        parts = ", ".join(f"{c} {ms[name][c]:.2f}" for c in CATEGORIES)
        print(f"{dtype}: {call} profile of {LABELS[name]}, ms per step over {n}: {parts}, "
              f"total {sum(ms[name].values()):.2f}")
    hub = ms["hub"]
    kernels, total = hub["GEMMs"] + hub["attention"], sum(hub.values())
    print(f"{dtype}: {call}: keras-hub's step / its GEMMs and attention {total / kernels:.2f}x, the most a "
          f"model with the same kernels gains on it; at 1.1x keras-hub all else gets "
          f"{total / 1.1 - kernels:.2f} ms of a step (keras-hub's all else: {total - kernels:.2f})")


if __name__ == "__main__":
    main()
