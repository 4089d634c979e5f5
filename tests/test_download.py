"""Checkpoints by URL and by name, offline: a local HTTP server on 127.0.0.1, a
Hugging Face cache laid out as huggingface_hub lays it out, and filesystems
the test provides (fsspec's memory://, TensorFlow's ram://)."""

import hashlib
import http.server
import io
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from helpers import to_numpy
from reference import random_vit_params
from reference import vit_forward

import keras_vit
from keras_vit import ViT
from keras_vit import released
from keras_vit.io import download
from keras_vit.weights import CheckpointError

# Download, cache and hub resolution do not depend on the backend (reading the
# files into a model is checked on every backend in test_checkpoints).
pytestmark = pytest.mark.backend_independent

X = np.random.default_rng(3).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test downloads into its own empty cache."""
    monkeypatch.setenv(download.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def npz_bytes(**kwargs):
    buffer = io.BytesIO()
    params = random_vit_params(**kwargs)
    np.savez(buffer, **params)
    return params, buffer.getvalue()


def assert_parity(model, params):
    diff = np.abs(to_numpy(model(X)) - vit_forward(params, X)).max()
    print(f"max |logit difference| = {diff:.2e}")
    assert diff < 1e-5


def files_in(directory):
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


# -- https:// -----------------------------------------------------------------


class Server(http.server.ThreadingHTTPServer):
    """Serves ``files`` (path -> bytes) with Range support. ``cut_after[path]
    = n`` sends the full Content-Length but closes after n bytes, once."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.files, self.cut_after, self.requests = {}, {}, []

    def url(self, path):
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        server = self.server
        server.requests.append((self.path, self.headers.get("Range")))
        if self.path not in server.files:
            self.send_error(404)
            return
        data = server.files[self.path]
        start = 0
        if self.headers.get("Range"):
            start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        cut = server.cut_after.pop(self.path, None)
        self.wfile.write(body if cut is None else body[:cut])
        if cut is not None:
            self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    server = Server()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_https_download_is_cached_and_loads_like_the_local_file(server, cache, tmp_path):
    params, data = npz_bytes()
    server.files["/vit_models/ViT-T.npz"] = data
    url = server.url("/vit_models/ViT-T.npz")
    model = ViT.from_checkpoint(url)
    assert_parity(model, params)
    cached = download.cache_path(url)
    assert cached.read_bytes() == data
    assert files_in(cache) == [cached.relative_to(cache).as_posix()]  # no .part left
    ViT.from_checkpoint(url)  # the second time from the cache
    assert len(server.requests) == 1


def test_https_download_cut_off_half_way_resumes(server, cache):
    _, data = npz_bytes()
    server.files["/ckpt.npz"] = data
    server.cut_after["/ckpt.npz"] = half = len(data) // 2
    url = server.url("/ckpt.npz")
    target = download.cache_path(url)
    with pytest.raises(CheckpointError, match=f"stopped after {half} of {len(data)} bytes.*run again to resume"):
        download.fetch(url, progress=False)
    assert not target.exists()
    assert target.with_name("ckpt.npz.part").stat().st_size == half
    assert download.fetch(url, progress=False) == target
    assert server.requests[-1] == ("/ckpt.npz", f"bytes={half}-")  # only the rest was asked for
    assert target.read_bytes() == data
    assert files_in(cache) == [target.relative_to(cache).as_posix()]


@pytest.mark.parametrize("wrong", ["size", "sha256"])
def test_a_wrong_file_is_refused_and_the_cache_left_clean(wrong, server, cache):
    _, data = npz_bytes()
    server.files["/ckpt.npz"] = data
    good = hashlib.sha256(data).hexdigest()
    check = dict(size=len(data) + 1) if wrong == "size" else dict(sha256="0" * 64)
    message = "bytes where" if wrong == "size" else "SHA-256 .* not the published"
    with pytest.raises(CheckpointError, match=f"is wrong \\(.*{message}.*deleted, not cached"):
        download.fetch(server.url("/ckpt.npz"), progress=False, **check)
    assert files_in(cache) == []
    path = download.fetch(server.url("/ckpt.npz"), sha256=good, size=len(data), progress=False)
    assert path.read_bytes() == data


def test_no_network_names_the_url_and_the_cache_path(server):
    url = server.url("/missing.npz")
    with pytest.raises(CheckpointError, match="HTTP 404"):
        download.fetch(url, progress=False)
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    url = f"http://127.0.0.1:{port}/vit_models/ViT-B_16.npz"
    with pytest.raises(CheckpointError) as error:
        ViT.from_checkpoint(url)
    assert url in str(error.value) and str(download.cache_path(url)) in str(error.value)
    # Filling the cache by hand is enough.
    params, data = npz_bytes()
    download.cache_path(url).parent.mkdir(parents=True, exist_ok=True)
    download.cache_path(url).write_bytes(data)
    assert_parity(ViT.from_checkpoint(url), params)


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv(download.CACHE_ENV)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    assert download.cache_path("https://storage.googleapis.com/vit_models/a/B_16.npz") == (
        tmp_path / "keras" / "keras_vit" / "https" / "storage.googleapis.com" / "vit_models" / "a" / "B_16.npz")
    with pytest.raises(CheckpointError, match="not a URL of a file"):
        download.cache_path("https://host/../etc/passwd")


# -- released checkpoints by name ----------------------------------------------


def test_released_name_downloads_loads_and_names_classes(server, monkeypatch, tmp_path, capsys):
    params, data = npz_bytes(num_classes=1000)
    server.files["/vit_models/tiny.npz"] = data
    entry = released.PretrainedWeights(
        name="vit_ti16.test_in1k", preset="vit_ti16", format="npz",
        url=server.url("/vit_models/tiny.npz"), image_size=32, num_classes=1000, top1=None,
        pretraining="ImageNet-1k", class_names="imagenet1k", reference="this test",
        sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    monkeypatch.setitem(released.PRETRAINED, entry.name, entry)
    model = ViT.from_preset("vit_ti16.test_in1k")
    assert_parity(model, params)
    assert model.class_names[:2] == ["tench, Tinca tinca", "goldfish, Carassius auratus"]
    assert ViT.from_checkpoint(entry.name, num_classes=3).class_names is None  # a new head
    fresh = ViT.from_preset("vit_ti16.test_in1k", pretrained=False)
    assert fresh.hidden_dim == 192 and fresh.num_layers == 12
    # keras-vit predict takes the name and prints ImageNet words.
    from PIL import Image

    from keras_vit.cli import main

    Image.fromarray(np.full((40, 40, 3), 120, np.uint8)).save(tmp_path / "photo.png")
    assert main(["predict", "vit_ti16.test_in1k", str(tmp_path / "photo.png"), "--top-k", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()[-1]
    top = np.argsort(to_numpy(model(np.zeros((1, 32, 32, 3), "float32") + 120 / 127.5 - 1))[0])[::-1]
    assert printed.startswith(f"{tmp_path / 'photo.png'}: {model.class_names[top[0]]} (")


def test_unknown_name_suggests_close_ones():
    with pytest.raises(CheckpointError, match="No checkpoint file or folder at vit_b16.augreg_in21k_ft_in1k_22"):
        ViT.from_checkpoint("vit_b16.augreg_in21k_ft_in1k_22")


# -- gs:// and other filesystems ---------------------------------------------------


def test_fsspec_filesystem_file_and_folder(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    params, data = npz_bytes()
    memory = fsspec.filesystem("memory")
    with memory.open("/bucket/models/vit.npz", "wb") as file:
        file.write(data)
    assert_parity(ViT.from_checkpoint("memory://bucket/models/vit.npz"), params)
    # A timm hub folder: config.json + model.safetensors (and a pickle, not copied).
    from checkpoint_files import save_safetensors
    from checkpoint_files import to_timm

    timm_params = random_vit_params(hidden=192, heads=3, mlp_dim=64, layers=1, patch=16)
    local = save_safetensors(to_timm(timm_params), tmp_path / "model.safetensors")
    for name, content in [("model.safetensors", local.read_bytes()), ("pytorch_model.bin", b"pickle"),
                          ("config.json", json.dumps({"architecture": "vit_tiny_patch16_224"}).encode())]:
        with memory.open(f"/bucket/timm/{name}", "wb") as file:
            file.write(content)
    model = ViT.from_checkpoint("memory://bucket/timm")
    assert sorted(os.listdir(download.cache_path("memory://bucket/timm"))) == ["config.json", "model.safetensors"]
    diff = np.abs(to_numpy(model(X)) - vit_forward(timm_params, X, approximate_gelu=False)).max()
    assert diff < 1e-5
    with pytest.raises(CheckpointError, match="No file or folder at memory://bucket/nothing.npz"):
        ViT.from_checkpoint("memory://bucket/nothing.npz")


def test_tensorflow_gfile_filesystem():
    try:
        import tensorflow as tf
    except ImportError:
        pytest.skip("TensorFlow is not installed: tf.io.gfile paths need it")
    params, data = npz_bytes()
    with tf.io.gfile.GFile("ram://bucket/vit.npz", "wb") as file:
        file.write(data)
    assert_parity(ViT.from_checkpoint("ram://bucket/vit.npz"), params)


# -- hf:// ------------------------------------------------------------------------

HF_SCRIPT = """
import sys
import keras
import numpy as np
from keras_vit import ViT
from keras_vit.weights import CheckpointError
x = np.load(sys.argv[1])
for url in ("hf://google/vit-test", "hf://google/vit-test@{commit}"):
    model = ViT.from_checkpoint(url)
    np.save(sys.argv[2], keras.ops.convert_to_numpy(model(x)))
    print(url, model.class_names)
try:
    ViT.from_checkpoint("hf://google/not-cached")
except CheckpointError as error:
    print("ERROR", error)
"""


def write_hf_cache(root, repo_id, files, commit):
    """A Hugging Face hub cache as huggingface_hub writes it: blobs named by
    their hash, snapshot files linking to them, refs/main naming the commit."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))


@pytest.mark.slow
def test_hf_url_from_the_hugging_face_cache_offline(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("huggingface_hub")
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        image_size=32, patch_size=8, num_labels=3, id2label={0: "cat", 1: "dog", 2: "fish"},
        label2id={"cat": 0, "dog": 1, "fish": 2})
    hf = transformers.ViTForImageClassification(config).eval()
    saved = tmp_path / "saved"
    hf.save_pretrained(saved, safe_serialization=True)
    commit = "0123456789abcdef0123456789abcdef01234567"
    files = {name: (saved / name).read_bytes() for name in ("config.json", "model.safetensors")}
    write_hf_cache(tmp_path / "hub", "google/vit-test", files, commit)
    np.save(tmp_path / "x.npy", X)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    result = subprocess.run(
        [sys.executable, "-c", HF_SCRIPT.format(commit=commit), tmp_path / "x.npy", tmp_path / "y.npy"],
        env=env, capture_output=True, text=True, timeout=300)
    print(result.stdout, result.stderr[-3000:])
    assert result.returncode == 0
    with torch.no_grad():
        expected = hf(pixel_values=torch.from_numpy(X.transpose(0, 3, 1, 2))).logits.numpy()
    assert np.abs(np.load(tmp_path / "y.npy") - expected).max() < 1e-5
    assert result.stdout.count("['cat', 'dog', 'fish']") == 2
    error = result.stdout.split("ERROR", 1)[1]
    assert "hf://google/not-cached" in error and str(tmp_path / "hub") in error and "HF_HUB_OFFLINE" in error


def test_hf_url_must_name_a_repository():
    with pytest.raises(CheckpointError, match="use hf://owner/repo"):
        ViT.from_checkpoint("hf://google")


def test_public_api():
    assert keras_vit.pretrained is released.pretrained
