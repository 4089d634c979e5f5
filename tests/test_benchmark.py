"""benchmarks/throughput.py: its FLOP count, its JSON schema, and one tiny run
end to end on the backend under test (keras_vit only: the peers are extras);
benchmarks/gelu_forms.py and benchmarks/serving_latency.py, each cut to a
tiny run."""

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


def load_script(name="throughput.py"):
    """A script of benchmarks/ as a module."""
    spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(ROOT, "benchmarks", name))
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
        (good_result(naflex="full", max_num_patches=4, valid_patches=4), "naflex"),  # a train row
        (good_result(mode="inference", naflex="half", max_num_patches=4, valid_patches=5), "naflex"),
        (good_result(vs_fixed=1.0), "vs_fixed"),
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


RESULTS = os.path.join(ROOT, "benchmarks", "results")
DATED = r"(\d{4}-\d{2}-\d{2})-[a-z0-9-]+\.json"  # benchmarks/results/<date>-<machine>.json, the kept history
SUMMARY_BENCHMARKS = ("throughput.py", "gelu_forms.py", "input_pipeline.py")
SUMMARY_NUMBERS = ("images_per_s", "vs_keras_hub", "fraction_of_peak", "executed_fraction_of_peak",
                   "fraction_of_backend_peak", "fraction_of_gemm_ceiling", "gemm_ceiling_fraction_of_peak",
                   "first_call_s", "peak_memory_mb", "peak_memory_gb")
SUMMARY_LISTS = ("images_per_s_by_round", "images_per_s_runs_range", "first_call_s_by_round")
CPU_KINDS = ("AVX2", "AVX-512", "AVX-512 with avx512_bf16", "AVX-512 with AMX", "other")


def dated_results():
    import re

    names = os.listdir(RESULTS) if os.path.isdir(RESULTS) else []
    return sorted(name for name in names if re.fullmatch(DATED, name))


def check_summary(doc, name, bench):
    """The summary form of benchmarks/README.md: a run's rows as its prose
    gave them, the fields a row has and no others required. Raises
    AssertionError naming the file and what is wrong."""
    import math
    import re

    def number(value, what, positive=False):
        assert isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and (value > 0 if positive else value >= 0), f"{name}: {what} = {value!r}"

    assert doc.get("form") == "summary" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(doc.get("date"))), name
    assert name.startswith(doc["date"] + "-"), f"{name}: the name starts with the date, {doc['date']}"
    machine = doc.get("machine")
    assert isinstance(machine, dict) and isinstance(machine.get("name"), str), f"{name}: machine.name"
    assert machine.get("cpu_cores") is None or isinstance(machine["cpu_cores"], int), f"{name}: machine.cpu_cores"
    assert machine.get("gpu") is None or isinstance(machine["gpu"], str), f"{name}: machine.gpu"
    assert machine.get("gpu") or "cpu_info" in machine, f"{name}: a CPU's record names it (machine.cpu_info)"
    if "cpu_info" in machine:
        info = machine["cpu_info"]
        assert info.get("kind") in CPU_KINDS and isinstance(info.get("vendor"), str), f"{name}: machine.cpu_info"
        assert all(isinstance(info.get(key, 0), int) for key in ("family", "model")), f"{name}: machine.cpu_info"
        assert all(isinstance(flag, str) for flag in machine.get("cpu_flags", [])), f"{name}: machine.cpu_flags"
    versions = machine.get("versions")
    assert isinstance(versions, dict) and versions and all(
        isinstance(v, str) for v in versions.values()), f"{name}: machine.versions {{dist: str}}"
    assert isinstance(doc.get("runs"), list) and doc["runs"], f"{name}: runs"
    for i, run in enumerate(doc["runs"]):
        where = f"{name}: runs[{i}]"
        assert run.get("benchmark") in SUMMARY_BENCHMARKS, f"{where}.benchmark"
        assert run.get("command") is None or isinstance(run["command"], str), f"{where}.command"
        for key, peaks in run.items():  # matmul_gflops, ..._by_round, ..._by_kernel: {dtype: {name: number(s)}}
            if key.startswith("matmul_"):
                stack = [peaks]
                while stack:
                    value = stack.pop()
                    if isinstance(value, dict):
                        stack.extend(value.values())
                    else:
                        for v in value if isinstance(value, list) else [value]:
                            number(v, f"runs[{i}].{key}", positive=True)
        assert isinstance(run.get("results"), list) and run["results"], f"{where}.results"
        for j, row in enumerate(run["results"]):
            at = f"{where}.results[{j}]"
            if run["benchmark"] == "input_pipeline.py":
                assert isinstance(row.get("pipeline"), str) and isinstance(row.get("hosts"), int), at
                number(row.get("images_per_s"), f"{at}.images_per_s", positive=True)
                continue
            assert row.get("impl") in bench.IMPLS, f"{at}.impl {row.get('impl')!r}"
            assert row.get("backend") in ("tensorflow", "jax", "torch"), f"{at}.backend {row.get('backend')!r}"
            assert row.get("mode") in ("inference", "train") and row.get("dtype") in ("float32", "bfloat16"), at
            assert isinstance(row.get("model"), str), f"{at}.model"
            assert (row.get("variant") in bench.HF_VARIANTS) if row["impl"] == "hf" else "variant" not in row, \
                f"{at}.variant (hf only)"
            assert row.get("gelu", "tanh") in ("tanh", "erf") and ("gelu" not in row or row["impl"] == "keras_vit"), \
                f"{at}.gelu (keras_vit only)"
            assert all(isinstance(row.get(key, 1), int) for key in ("image_size", "batch_size")), at
            assert any(key in row for key in SUMMARY_NUMBERS + SUMMARY_LISTS), f"{at}: no measurement"
            for key in SUMMARY_NUMBERS:
                if key in row:
                    number(row[key], f"{at}.{key}", positive=key in ("images_per_s", "vs_keras_hub"))
            for key in SUMMARY_LISTS:
                for v in row.get(key, []):
                    number(v, f"{at}.{key}", positive=True)
            if "images_per_s" in row and "images_per_s_runs_range" in row:  # the median lies in its runs' range
                low, high = row["images_per_s_runs_range"]
                assert low <= row["images_per_s"] <= high, f"{at}: {row['images_per_s']} outside {low}-{high}"
            if "images_per_s" in row and "images_per_s_by_round" in row:  # the median over rounds, as printed
                rounds = sorted(row["images_per_s_by_round"])
                middle = (rounds[(len(rounds) - 1) // 2] + rounds[len(rounds) // 2]) / 2
                assert abs(middle - row["images_per_s"]) <= 0.051, f"{at}: median of {rounds} is not {row['images_per_s']}"
        # keras_vit / keras-hub, where the record gives both rates: the ratio it states, to their rounding
        key = ("backend", "model", "mode", "dtype", "image_size", "batch_size")
        hub = {tuple(r.get(k) for k in key): r["images_per_s"] for r in run["results"]
               if r.get("impl") == "keras_hub" and "images_per_s" in r}
        for row in run["results"]:
            theirs = hub.get(tuple(row.get(k) for k in key))
            if row.get("impl") == "keras_vit" and "vs_keras_hub" in row and "images_per_s" in row and theirs:
                ours, ratio = row["images_per_s"], row["vs_keras_hub"]
                slack = ratio * (0.05 / ours + 0.05 / theirs) + 0.006  # both rates rounded to 0.1
                assert abs(ours / theirs - ratio) <= slack, f"{where}: {ours} / {theirs} is not {ratio}"


@pytest.mark.backend_independent
def test_the_dated_results_follow_their_schema():
    """Every dated file of benchmarks/results/ (the measurements' history):
    throughput.py's, serving_latency.py's, distillation.py's or fine_tuning.py's
    own --json output, checked by its `validate`, or the summary form
    benchmarks/README.md describes."""
    names = dated_results()
    assert names, "benchmarks/results/ keeps the dated measurements"
    bench, serving = load_script(), load_script("serving_latency.py")
    kinds = set()
    for name in names:
        with open(os.path.join(RESULTS, name)) as file:
            doc = json.load(file)
        if doc.get("form") == "summary":
            check_summary(doc, name, bench)
        elif doc.get("benchmark") == "serving_latency.py":
            serving.validate(doc)
        elif doc.get("benchmark") in ("distillation.py", "fine_tuning.py"):
            load_script(doc["benchmark"]).validate(doc)
        else:
            bench.validate(doc)
        kinds.add(name[len("2026-01-01-"):-len(".json")])
    # the CPU kinds docs/performance.md has tables for, and the GPU
    assert {"xeon-amx", "xeon-no-amx", "epyc-zen3", "epyc-zen4", "epyc-zen5", "h100"} <= kinds, kinds


@pytest.mark.backend_independent
def test_the_summary_check_names_what_is_wrong():
    """The control: a summary with a misread rate, or a row without a
    measurement, fails, naming the file."""
    bench = load_script()
    row = dict(impl="keras_vit", backend="jax", model="vit_b16", mode="inference", dtype="float32",
               images_per_s=6.3, vs_keras_hub=1.33)
    hub = dict(row, impl="keras_hub", images_per_s=4.8)
    del hub["vs_keras_hub"]
    doc = {"form": "summary", "date": "2026-11-26",
           "machine": {"name": "a CPU", "cpu_info": {"vendor": "GenuineIntel", "family": 6, "model": 207,
                                                      "kind": "AVX-512 with AMX"},
                       "cpu_cores": 2, "gpu": None, "versions": {"jax": "0.10.2"}},
           "runs": [{"benchmark": "throughput.py", "command": "...", "results": [row, hub]}]}
    check_summary(doc, "2026-11-26-xeon-amx.json", bench)
    with pytest.raises(AssertionError, match="2026-11-26-x.json: runs\\[0\\]: 6.3 / 4.0 is not 1.33"):
        check_summary(copy_with(doc, images_per_s=4.0, impl="keras_hub"), "2026-11-26-x.json", bench)
    with pytest.raises(AssertionError, match="no measurement"):
        check_summary(copy_with(doc, images_per_s=None, impl="keras_hub"), "2026-11-26-x.json", bench)
    with pytest.raises(AssertionError, match="starts with the date"):
        check_summary(doc, "2026-11-27-xeon-amx.json", bench)


def copy_with(doc, impl, **changes):
    """`doc` with the first row of `impl` changed (a None value removes the field)."""
    doc = json.loads(json.dumps(doc))
    row = next(r for r in doc["runs"][0]["results"] if r["impl"] == impl)
    for key, value in changes.items():
        row.pop(key) if value is None else row.__setitem__(key, value)
    return doc


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


# The pass that times each kind of row beside the fixed model: their
# bookkeeping (rows, ratios, labels) is the script's own on every backend,
# and the models they time run on every backend in test_naflex.py and
# test_token_merging.py.
NAFLEX_PASS, TOKEN_MERGING_PASS = "jax", "tensorflow"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny run on this backend, the fixed model with --naflex beside
    it in the `NAFLEX_PASS` and ToMe's r=2 in the `TOKEN_MERGING_PASS`:
    ViT-Ti/16 of two blocks at 32 px, inference and training, with the
    allocator's thresholds set. Returns (its JSON, its stdout, the environment)."""
    backend = keras.backend.backend()
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    variants = (["--naflex"] if backend == NAFLEX_PASS else []) + (
        ["--token-merging", "0,2"] if backend == TOKEN_MERGING_PASS else [])
    args = [sys.executable, SCRIPT, "--models", "vit_ti16", "--image-size", "32", "--batch-size", "2",
            "--backends", backend, "--impls", "keras_vit", "--modes", "inference,train", *variants,
            "--rounds", "1", "--runs", "2", "--steps", "1", "--warmup", "1", "--matmul-size", "128",
            "--threads", "1", "--device", "cpu", "--num-layers", "2", "--json", str(out)]
    # glibc's two allocator thresholds (docs/deploy.md): recorded with the machine, since they change the speed
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="1073741824", MALLOC_TRIM_THRESHOLD_="17179869184")
    run = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(out.read_text()), run.stdout, env


@pytest.mark.slow
def test_a_tiny_run_writes_the_documented_json(tiny_run):
    backend = keras.backend.backend()
    doc, stdout, env = tiny_run
    bench = load_script()
    bench.validate(doc)
    fixed = [r for r in doc["results"] if not r.get("naflex") and not r.get("token_merging")]  # the tests below
    speed = bench.speed_environment(env)
    assert doc["machine"]["environment"] == speed and speed["MALLOC_TRIM_THRESHOLD_"] == "17179869184"
    assert doc["machine"]["device_by_backend"] == {backend: "cpu"}
    assert doc["settings"]["optimizer"] == "keras_vit"  # training's AdamW, keras_vit's for every model
    # the peak is the best kernel measured: the backend's matmul
    kernels = doc["machine"]["matmul_gflops_by_kernel"][backend]
    assert sorted(kernels) == ["matmul"]
    assert doc["machine"]["matmul_gflops_by_backend"][backend] == max(kernels.values())
    assert sorted(r["mode"] for r in fixed) == ["inference", "train"]
    assert doc["settings"]["num_layers"] == 2
    assert doc["machine"]["cpu_info"] == bench.cpu_info()  # this machine's CPU, named
    assert bench.machine_line(doc["machine"]) in stdout
    assert "; MALLOC_MMAP_THRESHOLD_=1073741824; MALLOC_TRIM_THRESHOLD_=17179869184" in stdout
    two_blocks = count_params(preset_config("vit_ti16", image_size=32, num_layers=2))
    assert two_blocks == 5_680_552 - 10 * 444_864  # ViT-Ti/16 at 32 px less ten blocks of D 192
    for r in fixed:
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
    assert "keras_vit" in stdout and "img/s" in stdout and "%gemm" in stdout
    # each row shows the spread of its timed runs (slowest-fastest), the range of the JSON's runs
    for r in doc["results"]:
        runs = [v for round_runs in r["images_per_s_runs"] for v in round_runs]
        assert len(runs) == 2 and min(runs) <= r["images_per_s"] <= max(runs)
        variant = (["naflex", r["naflex"]] if r.get("naflex") else  # "keras_vit naflex full 4/4 ..."
                   [f"r={r['token_merging']}"] if r.get("token_merging") else [])  # "keras_vit r=2 ..."
        row = next(line for line in stdout.splitlines() if line.split()[:1] == ["keras_vit"]
                   and (line.split()[1:1 + len(variant)] == variant
                        or not variant and line.split()[1] not in ("naflex", "r=2"))
                   and f" {r['mode']} " in line)
        assert f" {min(runs):.1f}-{max(runs):.1f} " in row, row


@pytest.mark.slow
@pytest.mark.one_pass(NAFLEX_PASS)
def test_a_tiny_naflex_run_times_both_fills_beside_the_fixed_model(tiny_run):
    """--naflex at 32 px, patch 16 (a budget of 4 patches): the NaFlex model
    on square images (4 of 4 patches valid) and on images of half their
    height (2 of 4), each with its rate over the fixed model's."""
    backend = keras.backend.backend()
    doc, stdout, _ = tiny_run
    assert doc["settings"]["naflex"] is True
    inference = [r for r in doc["results"] if r["mode"] == "inference"  # NaFlex's: inference only
                 and not r.get("token_merging")]
    rows = {r.get("naflex"): r for r in inference}
    assert len(inference) == 3 and set(rows) == {None, "full", "half"}
    assert {r.get("naflex") for r in doc["results"] if r["mode"] == "train"} == {None}
    fixed = rows[None]
    assert "vs_fixed" not in fixed and "valid_patches" not in fixed
    for fill, valid in (("full", 4), ("half", 2)):
        row = rows[fill]
        assert (row["backend"], row["mode"], row["valid_patches"], row["max_num_patches"]) == (
            backend, "inference", valid, 4)
        assert row["params"] == fixed["params"]  # the same weights, NaFlex's form
        assert row["vs_fixed"] == pytest.approx(row["images_per_s"] / fixed["images_per_s"])
        assert f"keras_vit naflex {fill} {valid}/4 " in stdout
        assert f"keras_vit/naflex-{fill} {backend} vit_ti16 inference 32px bs2" in stdout


@pytest.mark.slow
@pytest.mark.one_pass(TOKEN_MERGING_PASS)
def test_a_tiny_run_times_token_merging_beside_the_model(tiny_run):
    """--token-merging 0,2 at 32 px, patch 16 (5 tokens): keras_vit's model
    merging 2 tokens in each block (5 -> 3 -> 2) in inference, the same
    parameters, with its rate over the model's without merging."""
    backend = keras.backend.backend()
    doc, stdout, _ = tiny_run
    assert doc["settings"]["token_merging"] == [0, 2]
    merged = [r for r in doc["results"] if r.get("token_merging")]
    assert [(r["token_merging"], r["mode"], r["backend"]) for r in merged] == [(2, "inference", backend)]
    [row] = merged
    plain = next(r for r in doc["results"] if r["mode"] == "inference" and not r.get("naflex")
                 and not r.get("token_merging"))
    assert row["params"] == plain["params"] and "vs_r0" not in plain
    assert row["vs_r0"] == pytest.approx(row["images_per_s"] / plain["images_per_s"])
    assert f"keras_vit/tome-2 {backend} vit_ti16 inference 32px bs2" in stdout
    assert "keras_vit r=2 " in stdout and "/r0" in stdout


@pytest.mark.backend_independent  # the script runs PyTorch in its own process, whatever the pass
@pytest.mark.slow
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
        # the rates are printed to 0.1 (each within 0.05 of its value), the ratios to 0.01
        for printed, rate in ((tanh_vs_hub, tanh), (erf_vs_hub, erf)):
            assert (rate - 0.05) / (hub + 0.05) - 0.005 <= printed <= (rate + 0.05) / (hub - 0.05) + 0.005, \
                (printed, rate, hub)
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


@pytest.mark.backend_independent  # the script exports in children of their own backends
@pytest.mark.slow
def test_the_serving_latency_script_times_each_artifact_and_its_ratio(tmp_path):
    """benchmarks/serving_latency.py, cut to one block at 32 px: the artifact
    with preprocessing, exported from TensorFlow to ONNX and OpenVINO in one
    child and timed in onnxruntime and OpenVINO in this one on uint8 photos;
    each row's images per second and ratio to onnxruntime are its printed
    and stored milliseconds', and the machine is named."""
    out = tmp_path / "serving.json"
    script = os.path.join(ROOT, "benchmarks", "serving_latency.py")
    run = subprocess.run([sys.executable, script, "--model", "vit_ti16", "--num-layers", "1", "--image-size", "32",
                          "--photo", "40x56", "--batches", "1,2", "--formats", "onnx,openvino", "--runs", "2",
                          "--rounds", "2", "--json", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads(out.read_text())
    load_script("serving_latency.py").validate(doc)
    assert run.stdout.splitlines()[0] == load_script().machine_line(doc["machine"])
    assert doc["settings"]["preprocessing"] is True and doc["settings"]["photo"] == [40, 56]
    rows = {(r["format"], r["batch"]): r for r in doc["results"]}
    assert sorted(rows) == [("onnx", 1), ("onnx", 2), ("openvino", 1), ("openvino", 2)]
    for (fmt, batch), row in rows.items():
        assert len(row["ms_rounds"]) == 2 and min(row["ms_rounds"]) <= row["ms"] <= max(row["ms_rounds"])
        assert row["images_per_s"] == pytest.approx(1000 * batch / row["ms"])
        assert row["vs_onnx"] == pytest.approx(rows["onnx", batch]["ms"] / row["ms"])
    table = {line.split()[0]: line for line in run.stdout.splitlines() if line.startswith(("onnxruntime", "OpenVINO"))}
    for fmt, name in (("onnx", "onnxruntime"), ("openvino", "OpenVINO")):
        assert f" {rows[fmt, 2]['ms']:12.1f} {rows[fmt, 2]['images_per_s']:13.1f} " in table[name], table[name]


@pytest.mark.backend_independent  # the script runs on JAX in its own process, whatever the pass
@pytest.mark.slow
def test_the_distillation_script_times_both_steps_and_trains_both_students(tmp_path):
    """benchmarks/distillation.py cut to one block and two steps a run: the
    machine line, a step's seconds alone and with a teacher and their
    ratio, each seed's two accuracies, and the JSON its `validate` checks."""
    import re

    out = tmp_path / "distillation.json"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "distillation.py"), "--cost",
                          "--num-layers", "1", "--image-size", "32", "--batch-size", "4", "--num-classes", "10",
                          "--runs", "1", "--rounds", "2", "--warmup", "1", "--digits", "--digits-steps", "2",
                          "--seeds", "0", "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "KERAS_BACKEND": "jax"})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("machine: ") and lines[0].endswith("KERAS_BACKEND=jax"), lines[0]
    doc = json.loads(out.read_text())
    load_script("distillation.py").validate(doc)
    cost = re.fullmatch(r"training step, vit_ti16 at 32 px, batch 4: alone ([0-9.]+) s, with a vit_s16 teacher "
                        r"\(hard\) ([0-9.]+) s, ([0-9.]+)x", lines[1])
    assert cost, lines[1]
    assert float(cost.group(3)) == pytest.approx(doc["cost"]["ratio"], abs=0.005)
    assert len(doc["cost"]["alone_rounds_s"]) == len(doc["cost"]["with_teacher_rounds_s"]) == 2
    seed = doc["digits"]["seeds"][0]
    assert lines[2] == (f"digits, seed 0: alone {seed['alone']:.4f}, with the teacher {seed['with_teacher']:.4f}")
    assert doc["digits"]["teacher_accuracy"] is not None and doc["digits"]["steps"] == 2
    with pytest.raises(AssertionError, match="the CPU is not named"):
        load_script("distillation.py").validate({**doc, "machine": {}})
    with pytest.raises(AssertionError, match="ratio"):
        load_script("distillation.py").validate({**doc, "cost": {**doc["cost"], "ratio": 9.0}})


@pytest.mark.backend_independent  # the script runs on JAX in its own process, whatever the pass
@pytest.mark.slow
def test_the_fine_tuning_script_runs_every_method_in_both_protocols(tmp_path):
    """benchmarks/fine_tuning.py cut to two steps a run and one seed, from a
    tiny pre-trained model: the machine line, each method's row (trainable
    weights, accuracy, step time, the adapter file against the model) and
    the JSON its `validate` checks."""
    import keras_vit

    base = keras_vit.ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                         num_classes=10, class_names=[str(i) for i in range(10)])
    base.save(tmp_path / "pretrained.keras")
    out = tmp_path / "fine_tuning.json"
    run = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "fine_tuning.py"), "--digits", "--vtab",
                          "--pretrained", str(tmp_path / "pretrained.keras"), "--steps", "2", "--seeds", "0",
                          "--runs", "1", "--rounds", "2", "--warmup", "1", "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "KERAS_BACKEND": "jax"})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("machine: ") and lines[0].endswith("KERAS_BACKEND=jax"), lines[0]
    doc = json.loads(out.read_text())
    script = load_script("fine_tuning.py")
    script.validate(doc)
    assert list(doc["digits"]) == list(doc["vtab"]) == list(script.METHODS)
    rows = doc["digits"]
    assert rows["full"]["trainable_params"] == rows["full"]["total_params"] == base.with_image_size(32).count_params()
    assert rows["head"]["trainable_params"] == 16 * 10 + 10
    assert rows["vpt-deep"]["trainable_params"] == rows["head"]["trainable_params"] + 10 * 16
    assert rows["dora"]["trainable_params"] > rows["lora"]["trainable_params"] > rows["head"]["trainable_params"]
    for method, row in rows.items():
        line = next(l for l in lines if l.startswith(f"digits, {method}: "))
        assert f"{row['trainable_params']:,} trainable, mean held-out accuracy {row['mean_accuracy']:.4f}" in line
    with pytest.raises(AssertionError, match="the CPU is not named"):
        script.validate({**doc, "machine": {}})
    with pytest.raises(AssertionError, match="vtab"):
        script.validate({**doc, "vtab": {**doc["vtab"], "lora": {**doc["vtab"]["lora"], "mean_accuracy": 2.0}}})
