"""Makes tests/data/dora_peft.npz: peft's DoRA (weight-decomposed LoRA, Liu et al., ICML
2024) on one small linear layer, forward and backward, computed by peft's own
``DoraLinearLayer`` (huggingface/peft ``src/peft/tuners/lora/dora.py``, commit
5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40).

Made with torch 2.13.0 CPU. peft is not installed (its package imports transformers):
``dora.py`` is loaded alone, with stand-ins for the three helpers it imports from peft.

    git -C <peft checkout> show 5d602fdb:src/peft/tuners/lora/dora.py > /tmp/dora.py
    PEFT_DORA=/tmp/dora.py .venv/bin/python tests/data/make_dora_peft.py

A ``torch.nn.Linear(6, 5)`` base layer with a rank-2 adapter, ``lora_alpha`` 4 (scaling
alpha / r = 2), lora_dropout 0. peft initialises the magnitude to the norm of
W0 + s·B·A per output unit; it is then moved away from that, as training would. The
output is what peft's ``Linear.forward`` returns; the gradients are those of
``(y * g).sum()``. Keras's layout, float32 unless said:

    kernel (6, 5)              W0.T             bias (5,)
    lora_kernel_a (6, 2)       lora_A.weight.T  lora_kernel_b (2, 5)   lora_B.weight.T
    magnitude_init (5,)        peft's initial magnitude
    magnitude (5,)             the magnitude the outputs are computed with
    x (3, 4, 6)   y (3, 4, 5)  g (3, 4, 5) the cotangent
    grad_lora_kernel_a (6, 2)  grad_lora_kernel_b (2, 5)  grad_magnitude (5,)
    rank () int64 2            alpha () float64 4.0

and torch's, for the same arrays: weight (5, 6), lora_A (2, 6), lora_B (5, 2),
grad_lora_A (2, 6), grad_lora_B (5, 2).
"""

import contextlib
import importlib.util
import os
import pathlib
import sys
import types

import numpy as np
import torch

IN, OUT, RANK, ALPHA = 6, 5, 2, 4.0
SCALING = ALPHA / RANK  # peft's layer.py, LoraLayer.update_layer (line 281), without rslora


def load_dora(path):
    """peft's dora.py, with peft's helpers as they act on an unquantized layer without DeepSpeed."""
    integrations = types.ModuleType("peft.utils.integrations")
    integrations.dequantize_module_weight = lambda module: module.weight
    integrations.gather_params_ctx = lambda params: contextlib.nullcontext()
    other = types.ModuleType("peft.utils.other")
    other.transpose = lambda weight, fan_in_fan_out: weight.T if fan_in_fan_out else weight
    sys.modules.update({"peft.utils.integrations": integrations, "peft.utils.other": other})
    spec = importlib.util.spec_from_file_location("peft_dora", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def peft_dora(dora_module, arrays, noise, dtype):
    """peft's ``lora.Linear`` with one DoRA adapter: magnitude, output, gradients."""
    def linear(weight, bias):
        layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=dtype)
        with torch.no_grad():
            layer.weight.copy_(torch.from_numpy(weight))
            if bias is not None:
                layer.bias.copy_(torch.from_numpy(bias))
        return layer

    base = linear(arrays["weight"], arrays["bias"]).requires_grad_(False)  # peft freezes the base layer
    lora_A, lora_B = linear(arrays["lora_A"], None), linear(arrays["lora_B"], None)
    dora = dora_module.DoraLinearLayer(fan_in_fan_out=False)
    # variants.py, DoraLinearVariant.init (lines 146-166): update_layer gets the adapters' weights.
    dora.update_layer(base_layer=base, lora_A=lora_A.weight, lora_B=lora_B.weight, scaling=SCALING)
    magnitude_init = dora.weight.detach().clone()
    with torch.no_grad():
        dora.weight.mul_(1 + 0.1 * torch.from_numpy(noise).to(dtype))
    x = torch.from_numpy(arrays["x"]).to(dtype)
    # layer.py, Linear.forward: result = self.base_layer(x) (line 1049), then the variant's forward
    # (line 1065). variants.py, DoraLinearVariant.forward: with nn.Identity dropout base_result is
    # that result (line 234), and DoRA's delta is added to it (line 239); dora.py's forward takes the
    # bias back out of base_result (line 161). (_mixed_batch_forward refuses DoRA: layer.py line 812.)
    result = base(x)
    y = result + dora(x, lora_A=lora_A, lora_B=lora_B, scaling=SCALING, base_layer=base,
                      base_result=result, adapter_name="default")
    (y * torch.from_numpy(arrays["g"]).to(dtype)).sum().backward()
    return {"magnitude_init": magnitude_init, "magnitude": dora.weight.detach(), "y": y.detach(),
            "grad_lora_A": lora_A.weight.grad, "grad_lora_B": lora_B.weight.grad, "grad_magnitude": dora.weight.grad}


def closed_form(arrays, out, dtype):
    """m / ||W0 + s B A||_c (W0 x + s B A x) + b, the norm per output unit and detached."""
    W0, b, x, g = (torch.from_numpy(arrays[k]).to(dtype) for k in ("weight", "bias", "x", "g"))
    A, B = (torch.from_numpy(arrays[k]).to(dtype).requires_grad_() for k in ("lora_A", "lora_B"))
    m = out["magnitude"].clone().requires_grad_()
    V = W0 + SCALING * B @ A
    y = m / torch.linalg.norm(V, dim=1).detach() * (x @ W0.T + SCALING * x @ A.T @ B.T) + b
    (y * g).sum().backward()
    return {"magnitude_init": torch.linalg.norm(V, dim=1).detach(), "y": y.detach(),
            "grad_lora_A": A.grad, "grad_lora_B": B.grad, "grad_magnitude": m.grad}


def main():
    dora_module = load_dora(os.environ["PEFT_DORA"])
    rng = np.random.default_rng(0)
    arrays = {name: (scale * rng.normal(size=shape)).astype("float32") for name, shape, scale in (
        ("weight", (OUT, IN), 0.3), ("bias", (OUT,), 0.3), ("lora_A", (RANK, IN), 0.3),
        ("lora_B", (OUT, RANK), 0.3), ("x", (3, 4, IN), 1.0), ("g", (3, 4, OUT), 1.0))}
    noise = rng.normal(size=OUT)
    outs = {}
    for dtype in (torch.float64, torch.float32):
        outs[dtype] = peft_dora(dora_module, arrays, noise, dtype)
        reference = closed_form(arrays, outs[dtype], dtype)
        diffs = {k: float((outs[dtype][k] - v).abs().max()) for k, v in reference.items()}
        print(dtype, "peft vs closed form, max |diff|:", diffs)
        assert max(diffs.values()) < 1e-5, diffs
    print("float32 vs float64, max |diff|:",
          {k: float((v.double() - outs[torch.float64][k]).abs().max()) for k, v in outs[torch.float32].items()})
    arrays.update({k: v.numpy() for k, v in outs[torch.float32].items()})
    arrays.update(
        kernel=arrays["weight"].T, lora_kernel_a=arrays["lora_A"].T, lora_kernel_b=arrays["lora_B"].T,
        grad_lora_kernel_a=arrays["grad_lora_A"].T, grad_lora_kernel_b=arrays["grad_lora_B"].T,
        rank=np.array(RANK, "int64"), alpha=np.array(ALPHA, "float64"))
    path = pathlib.Path(__file__).with_name("dora_peft.npz")
    np.savez(path, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    print(path, {k: (v.shape, str(v.dtype)) for k, v in sorted(arrays.items())})


if __name__ == "__main__":
    main()
