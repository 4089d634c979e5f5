"""benchmarks/throughput.py: its FLOP count, its JSON schema, and one tiny run
end to end on the backend under test (keras_vit only: the peers are extras)."""

import importlib.util
import json
import os
import subprocess
import sys

import keras
import pytest

from keras_vit.presets import count_params
from keras_vit.presets import preset_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "throughput.py")


def load_script():
    spec = importlib.util.spec_from_file_location("throughput", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.backend_independent
def test_flops_are_the_papers_b16_count_and_scale_with_tokens():
    bench = load_script()
    b16 = dict(hidden_dim=768, num_layers=12, num_heads=12, mlp_dim=3072, patch_size=16)
    assert abs(bench.macs_per_image(b16, 224) / 1e9 - 17.56) < 0.01
    # 384 px: 577 tokens instead of 197; attention grows with the square.
    tokens, d, m = (384 // 16) ** 2 + 1, 768, 3072
    by_hand = (576 * 16 * 16 * 3 * d + 12 * (4 * tokens * d * d + 2 * tokens**2 * d + 2 * tokens * d * m)
               + d * 1000)
    assert bench.macs_per_image(b16, 384) == by_hand
    # A last block that updates the [class] token alone: keys and values of every
    # token, then one query's attention, output projection and MLP.
    last_full = 4 * tokens * d * d + 2 * tokens**2 * d + 2 * tokens * d * m
    last_class = 2 * tokens * d * d + 2 * d * d + 2 * tokens * d + 2 * d * m
    assert bench.macs_per_image(b16, 384, last_block_queries=1) == by_hand - last_full + last_class
    assert bench.macs_per_image(b16, 384, last_block_queries=tokens) == by_hand
    # The GEMM ceiling's products: the same FLOPs, forward and with both gradients of each.
    forward = bench.model_gemms(b16, 384, 2, "inference")
    assert bench.gemm_flops(forward) == 2 * 2 * by_hand
    assert forward[(2 * 12, tokens, 64, tokens)] == 12  # Q K^T: batch x heads products per block
    train = bench.model_gemms(b16, 384, 2, "train")
    assert bench.gemm_flops(train) == 3 * bench.gemm_flops(forward)
    rows = 2 * tokens
    # fc1 with fc2's dX, fc2 with fc1's dX (the same shapes), then q, k, v, out with theirs
    assert train[(1, rows, d, m)] == train[(1, rows, m, d)] == 2 * 12 and train[(1, rows, d, d)] == 8 * 12
    assert train[(1, m, rows, d)] == 12 and train[(1, d, rows, m)] == 12  # dW of fc1 and fc2


def good_result(**changes):
    result = dict(impl="keras_vit", backend="jax", model="vit_ti16", mode="train", image_size=32,
                  batch_size=2, dtype="float32", images_per_s=10.0, fraction_of_peak=0.1,
                  peak_memory_mb=100.0, first_call_s=2.0)
    return {**result, **changes}


@pytest.mark.backend_independent
@pytest.mark.parametrize(
    "result, message",
    [
        (good_result(impl="timm"), "impl 'timm'"),
        (good_result(impl="hf"), "variant"),
        (good_result(images_per_s=0.0), "images_per_s > 0"),
        (good_result(batch_size=2.0), "batch_size is float, want int"),
        ({k: v for k, v in good_result().items() if k != "first_call_s"}, "first_call_s is NoneType"),
    ],
)
def test_schema_check_names_what_is_wrong(result, message):
    bench = load_script()
    machine = {"matmul_gflops": 100.0, "matmul_gflops_by_backend": {"jax": 100.0}}
    bench.validate({"machine": machine, "results": [good_result()]})
    with pytest.raises(ValueError, match=message):
        bench.validate({"machine": machine, "results": [result]})


@pytest.mark.backend_independent
def test_schema_check_names_a_bad_kernel_peak():
    bench = load_script()
    machine = {"matmul_gflops": 100.0, "matmul_gflops_by_backend": {"torch": 100.0},
               "matmul_gflops_by_kernel": {"torch": {"matmul": 90.0, "onednn_linear": 100.0}}}
    bench.validate({"machine": machine, "results": [good_result()]})
    machine["matmul_gflops_by_kernel"] = {"torch": 100.0}
    with pytest.raises(ValueError, match=r"matmul_gflops_by_kernel \{backend: \{kernel: float\}\}"):
        bench.validate({"machine": machine, "results": [good_result()]})


@pytest.mark.backend_independent
def test_schema_check_names_a_bad_environment():
    bench = load_script()
    machine = {"matmul_gflops": 100.0, "matmul_gflops_by_backend": {"torch": 100.0},
               "environment": {"OMP_NUM_THREADS": "2", "MALLOC_TRIM_THRESHOLD_": "17179869184"}}
    bench.validate({"machine": machine, "results": [good_result()]})
    assert bench.speed_environment({"OMP_NUM_THREADS": "2", "HOME": "/root"}) == {"OMP_NUM_THREADS": "2"}
    for bad in ({"HOME": "/root"}, {"OMP_NUM_THREADS": 2}):
        machine["environment"] = bad
        with pytest.raises(ValueError, match=r"machine.environment \{name: str\}"):
            bench.validate({"machine": machine, "results": [good_result()]})


CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
cpu family\t: {family}
model\t\t: {model}
model name\t: {name}
flags\t\t: fpu sse2 {flags}

processor\t: 1
vendor_id\t: {vendor}
"""


@pytest.mark.backend_independent
@pytest.mark.parametrize("vendor, family, model, name, flags, kind, isa", [
    ("AuthenticAMD", 25, 1, "AMD EPYC 7B13", "avx2 fma", "AVX2", ["avx2", "fma"]),
    ("AuthenticAMD", 26, 2, "AMD EPYC 9B45", "avx2 fma avx512f avx512_vnni avx512_bf16 avx512_vp2intersect",
     "AVX-512 with avx512_bf16", ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]),
    ("AuthenticAMD", 25, 17, "AMD EPYC", "avx2 fma avx512f avx512_vnni avx512_bf16",  # Zen 4
     "AVX-512 with avx512_bf16", ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]),
    ("GenuineIntel", 6, 207, "Intel(R) Xeon(R) Processor", "avx2 fma avx512f avx512_vnni avx512_bf16 avx512_fp16",
     "AVX-512 with avx512_bf16", ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]),  # AMX not exposed
    ("GenuineIntel", 6, 167, "Intel(R) Xeon(R) Processor", "avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile amx_int8",
     "AVX-512 with AMX", ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"]),
])
def test_the_benchmark_names_the_cpu_kind(vendor, family, model, name, flags, kind, isa):
    bench = load_script()
    info = bench.cpu_info(CPUINFO.format(vendor=vendor, family=family, model=model, name=name, flags=flags))
    assert info == {"model_name": name, "vendor": vendor, "family": family, "model": model,
                    "isa": isa, "kind": kind}
    line = bench.machine_line({"cpu_info": info, "cpu_cores": 2, "versions": {"jax": "0.10.2"}})
    assert line == (f"machine: {name} (family {family}, model {model}; {kind}: {' '.join(isa)}), "
                    "2 cores; jax 0.10.2")


@pytest.mark.slow
def test_a_tiny_run_writes_the_documented_json(tmp_path):
    backend = keras.backend.backend()
    out = tmp_path / "bench.json"
    args = [sys.executable, SCRIPT, "--models", "vit_ti16", "--image-size", "32", "--batch-size", "2",
            "--backends", backend, "--impls", "keras_vit", "--modes", "inference,train", "--rounds", "1",
            "--runs", "2", "--steps", "1", "--warmup", "1", "--matmul-size", "128", "--threads", "1",
            "--device", "cpu", "--num-layers", "2", "--json", str(out)]
    # glibc's two allocator thresholds (docs/deploy.md): recorded with the machine, since they change the speed
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="1073741824", MALLOC_TRIM_THRESHOLD_="17179869184")
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(out.read_text())
    bench = load_script()
    bench.validate(doc)
    speed = bench.speed_environment(env)
    assert doc["machine"]["environment"] == speed and speed["MALLOC_TRIM_THRESHOLD_"] == "17179869184"
    assert doc["machine"]["device_by_backend"] == {backend: "cpu"}
    assert doc["settings"]["optimizer"] == "keras_vit"  # training's AdamW, keras_vit's for every model
    # the peak is the best kernel measured: the backend's matmul
    kernels = doc["machine"]["matmul_gflops_by_kernel"][backend]
    assert sorted(kernels) == ["matmul"]
    assert doc["machine"]["matmul_gflops_by_backend"][backend] == max(kernels.values())
    assert sorted(r["mode"] for r in doc["results"]) == ["inference", "train"]
    assert doc["settings"]["num_layers"] == 2
    assert doc["machine"]["cpu_info"] == bench.cpu_info()  # this machine's CPU, named
    assert bench.machine_line(doc["machine"]) in run.stdout
    assert "; MALLOC_MMAP_THRESHOLD_=1073741824; MALLOC_TRIM_THRESHOLD_=17179869184" in run.stdout
    two_blocks = count_params(preset_config("vit_ti16", image_size=32, num_layers=2))
    assert two_blocks == 5_680_552 - 10 * 444_864  # ViT-Ti/16 at 32 px less ten blocks of D 192
    for r in doc["results"]:
        assert (r["impl"], r["backend"], r["params"]) == ("keras_vit", backend, two_blocks)
        assert r["gflops_per_image"] > 0 and 0 < r["fraction_of_peak"]
        # token pooling: the last block updates one token, so less is executed than the model counts
        assert 0 < r["executed_gflops_per_image"] < r["gflops_per_image"]
        assert r["executed_fraction_of_peak"] == pytest.approx(
            r["fraction_of_peak"] * r["executed_gflops_per_image"] / r["gflops_per_image"])
        # the model's own products alone, measured in its child: the share of peak splits in two
        assert r["gemm_ceiling_gflops"] > 0
        assert r["fraction_of_peak"] == pytest.approx(
            r["fraction_of_gemm_ceiling"] * r["gemm_ceiling_fraction_of_peak"])
    assert "keras_vit" in run.stdout and "img/s" in run.stdout and "%gemm" in run.stdout
    # each row shows the spread of its timed runs (slowest-fastest), the range of the JSON's runs
    for r in doc["results"]:
        runs = [v for round_runs in r["images_per_s_runs"] for v in round_runs]
        assert len(runs) == 2 and min(runs) <= r["images_per_s"] <= max(runs)
        row = next(line for line in run.stdout.splitlines()
                   if line.startswith("keras_vit") and f" {r['mode']} " in line)
        assert f" {min(runs):.1f}-{max(runs):.1f} " in row, row


@pytest.mark.backend_independent  # the script runs PyTorch in its own process, whatever the pass
def test_the_gelu_forms_script_prints_both_forms_and_their_ratios():
    """benchmarks/gelu_forms.py, cut to one block at 32 px: the machine line, then
    per dtype the kernel times and the three models' rates in inference and in
    training, whose printed ratios are the quotients of the printed numbers (to
    their rounding); each mode's profiles split each model's step into parts
    that add up to its total, and keras-hub's bound is computed from its parts."""
    import re

    script = os.path.join(ROOT, "benchmarks", "gelu_forms.py")
    run = subprocess.run([sys.executable, script, "--image-size", "32", "--batch-size", "2", "--num-layers", "1",
                          "--runs", "2", "--rounds", "1", "--dtype", "float32", "--profile-steps", "1"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("machine: ") and "torch 2.13.0" in lines[0], lines[0]
    number = r"([0-9.]+)"
    kernel = re.fullmatch(rf"float32: torch GELU on \(10, 3072\): tanh {number} ms, erf {number} ms, "
                          rf"tanh / erf {number}x", lines[1])
    assert kernel, lines[1]
    tanh_ms, erf_ms, ratio = map(float, kernel.groups())
    half = 0.0005  # the printed milliseconds' rounding
    assert (tanh_ms - half) / (erf_ms + half) - 0.005 <= ratio <= (tanh_ms + half) / (erf_ms - half) + 0.005
    for first, call in ((2, "predict_on_batch"), (7, "train_on_batch")):
        rates = re.fullmatch(rf"float32: {call} img/s, best of 1 rounds: keras_vit tanh GELU {number}, "
                             rf"keras_vit erf GELU {number}, keras-hub {number}; /hub: tanh {number}x, "
                             rf"erf {number}x", lines[first])
        assert rates, lines[first:]
        tanh, erf, hub, tanh_vs_hub, erf_vs_hub = map(float, rates.groups())
        assert tanh_vs_hub == pytest.approx(tanh / hub, abs=0.01) and erf_vs_hub == pytest.approx(erf / hub, abs=0.01)
        for line, label in zip(lines[first + 1:first + 4], ("keras_vit tanh GELU", "keras_vit erf GELU", "keras-hub")):
            parts = re.fullmatch(rf"float32: {call} profile of {label}, ms per step over 1: GEMMs {number}, "
                                 rf"attention {number}, GELU {number}, rest {number}, total {number}", line)
            assert parts, line
            gemms, attention, gelu, rest, total = map(float, parts.groups())
            assert gemms > 0 and gelu > 0 and rest > 0, line  # every model multiplies and applies its GELU
            assert gemms + attention + gelu + rest == pytest.approx(total, abs=0.025), line
        bound = re.fullmatch(rf"float32: {call}: keras-hub's step / its GEMMs and attention {number}x, the most a "
                             rf"model with the same kernels gains on it; at 1.1x keras-hub all else gets "
                             rf"(-?[0-9.]+) ms of a step \(keras-hub's all else: {number}\)", lines[first + 4])
        assert bound, lines[first + 4]
        ratio, allowed, hub_rest = map(float, bound.groups())
        kernels = gemms + attention  # keras-hub's, the last profile
        assert ratio == pytest.approx(total / kernels, rel=0.05), (ratio, total, kernels)
        assert allowed == pytest.approx(total / 1.1 - kernels, abs=0.05)
        assert hub_rest == pytest.approx(gelu + rest, abs=0.025)
    assert len(lines) == 12, lines
