"""Input pipelines that keep a pod fed: every host reads its own part of the
data (digits, an image folder, a prepared TFDS dataset), images stay encoded
through the shuffle and a resume's skip, and the training crops decode only
the crop of a JPEG with the specified distribution. (That the optimizers,
losses and schedules come without TensorFlow is checked in test_training.)"""

import hashlib
import importlib.util
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_run_config

from keras_vit.data import concatenate_shards
from keras_vit.data import input_pipeline
from keras_vit.data import load_source
from keras_vit.data import preprocessing
from keras_vit.distribution import Topology
from keras_vit.training import RunError
from keras_vit.training import run

pytestmark = pytest.mark.backend_independent  # tf.data: the same bytes on every backend (test_cross_backend)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = dict(heights=(30, 60), widths=(40, 70))  # small JPEGs of varied shapes


def bench():
    """benchmarks/input_pipeline.py: its JPEG folder and TFDS writers."""
    spec = importlib.util.spec_from_file_location("input_pipeline_bench",
                                                  os.path.join(ROOT, "benchmarks", "input_pipeline.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same kind of split three ways: the embedded digits, a JPEG folder
    of 23 images, and 23 JPEGs prepared as a TFDS dataset (real TFRecord
    files, read by `even_splits`: mock data ignores slicing)."""
    work = tmp_path_factory.mktemp("sources")
    script = bench()
    folder = script.write_jpeg_folder(str(work / "jpegs"), 23, **SIZES)
    name = script.prepare_tfds(str(work / "tfds"), 23, name="vit_test_images", **SIZES)
    return {"digits": load_source("digits", "train[:50]"), "folder": load_source(folder, "train"),
            "tfds": load_source(name, "train", data_dir=str(work / "tfds"))}


def fingerprints(images):
    return [hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest() for image in images]


def record_fingerprints(source):
    """One fingerprint per record, of the encoded image as stored."""
    return [hashlib.sha1(np.asarray(record["image"]).tobytes()).hexdigest()
            for record in source.records.as_numpy_iterator()]


@pytest.mark.parametrize("kind", ["digits", "folder", "tfds"])
@pytest.mark.slow_cases("tfds")
def test_the_shards_of_an_epoch_are_disjoint_and_cover_the_split(kind, sources):
    source = sources[kind]
    whole = fingerprints(np.concatenate([x for x, _ in input_pipeline(
        source, image_size=16, batch_size=64, training=False)]))  # every image once, in order
    assert len(set(whole)) == source.num_examples
    for count in (2, 3, 4):
        parts = [source.shard(i, count) for i in range(count)]
        sizes = [part.num_examples for part in parts]
        assert sum(sizes) == source.num_examples and max(sizes) - min(sizes) <= 1, sizes
        stored = [record_fingerprints(part) for part in parts]
        assert sorted(sum(stored, [])) == sorted(record_fingerprints(source))  # the records themselves
        epochs = []
        for i, part in enumerate(parts):
            # Host i of `count`, one row of each global batch: its first two epochs.
            stream = input_pipeline(source, image_size=16, batch_size=count, training=True,
                                    preprocess="resize", seed=5, shard=(i, count))
            images = np.concatenate([x for x, _ in stream.take(2 * part.num_examples)])
            first, second = fingerprints(images[:part.num_examples]), fingerprints(images[part.num_examples:])
            assert sorted(first) == sorted(second) and first != second  # reshuffled, same content
            epochs.append(first)
        seen = sum(epochs, [])
        assert len(set(seen)) == len(seen), f"{count} hosts read an image twice"
        assert sorted(seen) == sorted(whole), f"{count} hosts together miss images of the split"


@pytest.mark.parametrize("kind", ["digits", "folder", "tfds"])
@pytest.mark.slow
def test_a_resumed_host_continues_its_stream(kind, sources):
    """Batch k on, across an epoch's end, with crops, flips and RandAugment:
    equal to the uninterrupted stream of the same host."""
    common = dict(image_size=24, batch_size=6, training=True, seed=2, randaugment=(2, 5), shard=(1, 3))
    stream = [x.numpy() for x, _ in input_pipeline(sources[kind], **common).take(12)]
    for start in (3, 9):  # the part has 7 or 8 examples: batch 3 spans epochs 0 and 1
        resumed = [x.numpy() for x, _ in input_pipeline(sources[kind], **common, start_batch=start).take(3)]
        for a, b in zip(resumed, stream[start:start + 3], strict=True):
            assert a.tobytes() == b.tobytes()


def test_a_resume_decodes_no_skipped_image(sources, monkeypatch):
    """Skipping 100 batches (400 images, 17 epochs) costs no decode: the
    records are skipped (TFDS) or indexed (folder) before the crop decodes,
    which counts its runs here."""
    from keras_vit.data import sources as sources_module

    decoded = []
    original = preprocessing.random_crop_encoded

    def counting(contents, *args):
        contents = tf.py_function(lambda c: decoded.append(1) or c, [contents], tf.string)
        contents.set_shape([])
        return original(contents, *args)

    monkeypatch.setattr(sources_module, "random_crop_encoded", counting)
    for kind in ("folder", "tfds"):
        decoded.clear()
        images, _ = next(iter(input_pipeline(sources[kind], image_size=8, batch_size=4, training=True,
                                             start_batch=100)))
        assert images.shape == (4, 8, 8, 3)
        assert 4 <= len(decoded) < 100, (kind, len(decoded))  # the batch, and what runs ahead of it


def test_crops_follow_the_specification():
    """The windows: area in (0.08, 1) of the image, aspect ratio in (3/4, 4/3),
    spread over the range. The encoded path takes the window the decoded one
    takes for the same key: the pixels are equal for PNG and for JPEG with
    full colour, and within a few levels at the edges with subsampled colour."""
    keys = [tf.constant([7, i], tf.int64) for i in range(400)]
    shape = tf.constant([300, 400, 3])
    areas, ratios = [], []
    for key in keys:
        begin, size = (t.numpy() for t in preprocessing.crop_window(shape, key, (0.08, 1.0)))
        assert (begin >= 0).all() and (begin + size <= [300, 400]).all()
        areas.append(size[0] * size[1] / (300 * 400))
        ratios.append(size[1] / size[0])
    areas, ratios = np.array(areas), np.array(ratios)
    assert areas.min() >= 0.08 - 0.01 and areas.max() <= 1.0
    assert ratios.min() >= 3 / 4 - 0.02 and ratios.max() <= 4 / 3 + 0.02
    # Spread over both ranges (large boxes of an extreme aspect ratio do not
    # fit the image and are drawn again, so large areas are rarer).
    assert np.quantile(areas, 0.1) < 0.2 and np.quantile(areas, 0.9) > 0.6
    assert np.quantile(ratios, 0.1) < 0.85 and np.quantile(ratios, 0.9) > 1.2
    assert (areas > 0.999).mean() < 0.05  # the whole-image fallback is rare

    rng = np.random.default_rng(0)
    smooth = tf.image.resize(rng.uniform(0, 255, (6, 8, 3)), (120, 160), method="bicubic")
    image = tf.cast(tf.clip_by_value(smooth, 0, 255), tf.uint8)
    for encoded, tolerance in ((tf.io.encode_png(image), 0), (tf.io.encode_jpeg(image, chroma_downsampling=False), 0),
                               (tf.io.encode_jpeg(image), 4)):
        decoded = preprocessing.decode_image(encoded)
        for key in keys[:20]:
            a = preprocessing.random_crop_encoded(encoded, key, (32, 32), (0.08, 1.0), True).numpy()
            b = preprocessing.random_crop(decoded, key, (32, 32), (0.08, 1.0), True).numpy()
            assert np.abs(a - b).mean() <= tolerance, (tolerance, np.abs(a - b).mean())


def test_the_shuffle_holds_encoded_images(sources):
    """The folder's and the digits' epochs are shuffled by index (no buffer);
    TFDS's buffer takes the records as stored: JPEG bytes."""
    assert sources["folder"].table is not None and sources["folder"].encoding == "file"
    assert sources["digits"].table is not None
    tfds_source = sources["tfds"]
    assert tfds_source.table is None and tfds_source.encoding == "bytes"
    record = next(tfds_source.records.as_numpy_iterator())["image"]
    assert isinstance(record, bytes) and record[:3] == b"\xff\xd8\xff"


# -- hosts sharing one run -----------------------------------------------------

# The run the data-shard checks plan: 2 updates of 8 images.
SHARDED_RUN = dict(steps=2, batch_size=8)


@pytest.mark.slow
def test_data_shards_make_the_stream_independent_of_the_host_count(sources):
    """A run's data is read as data_shards parts: one pipeline reading all 4,
    2 pipelines reading 2 each, or 4 reading one, give the same global
    batches (each the parts' rows side by side)."""
    config = tiny_run_config(**SHARDED_RUN, data_shards=4, mixup=0.5)
    source = sources["digits"]

    def global_batches(pipelines):
        streams = [run.train_dataset(config, source, start_batch=1, shard=(i, pipelines))
                   for i in range(pipelines)]
        return [tuple(t.numpy() for t in batch) for batch in concatenate_shards(streams).take(3)]

    one = global_batches(1)
    assert one[0][0].shape == (8, 16, 16, 3)
    for pipelines in (2, 4):
        for a, b in zip(global_batches(pipelines), one, strict=True):
            for x, y in zip(a, b, strict=True):
                assert x.tobytes() == y.tobytes()


def test_a_run_streams_images_scaled_as_its_model_records(sources):
    """A fine-tuning run from a model with ImageNet's scaling (a keras-hub
    DeiT's converter) trains and evaluates on images so scaled: the same
    pixels as the [-1, 1] stream, scaled per channel."""
    from keras_vit import ViTConfig

    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    model = ViTConfig(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=8,
                      mlp_dim=8, pixel_scale=tuple(1 / (255 * std)), pixel_offset=tuple(-mean / std))
    scaling = run.pixel_scaling(model)
    assert scaling == dict(pixel_scale=model.pixel_scale, pixel_offset=model.pixel_offset)
    config, source = tiny_run_config(**SHARDED_RUN), sources["digits"]
    for make in (lambda **kw: run.train_dataset(config, source, **kw),
                 lambda **kw: run.eval_dataset(config, source, **kw)):
        paper = next(iter(make()))[0].numpy()
        scaled = next(iter(make(scaling=scaling)))[0].numpy()
        np.testing.assert_allclose(scaled, (paper + 1) * 127.5 * model.pixel_scale + model.pixel_offset,
                                   atol=1e-4)


def test_data_shards_the_hosts_cannot_share_are_refused(tmp_path):
    with pytest.raises(RunError, match=r"data as 4 parts \(--data-shards 4\), which the 3 input pipelines"):
        run.data_shards(tiny_run_config(**SHARDED_RUN, data_shards=4), tmp_path, Topology(num_shards=3))
    with pytest.raises(RunError, match="--batch-size 8 does not split into the 3 parts"):
        run.data_shards(tiny_run_config(**SHARDED_RUN, data_shards=3), tmp_path, Topology(num_shards=1))
    # one per pipeline
    assert run.data_shards(tiny_run_config(**SHARDED_RUN), tmp_path, Topology(num_shards=2)) == 2
    with pytest.raises(ValueError, match="--data-shards must be a positive integer"):
        tiny_run_config(**SHARDED_RUN, data_shards=0)


@pytest.mark.slow
def test_the_benchmark_reports_every_ratio_and_target(tmp_path):
    """benchmarks/input_pipeline.py end to end, tiny: its JSON has a rate per
    pipeline and host count, every ratio and each target's verdict."""
    out = tmp_path / "bench.json"
    assert bench().main(["--images", "24", "--image-size", "32", "--batch-size", "8", "--shards", "1,2",
                         "--runs", "1", "--work", str(tmp_path / "work"), "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert {(r["pipeline"], r["hosts"]) for r in results["rates"]} == {
        (name, hosts) for name in ("keras_vit folder", "keras_vit tfds", "reference folder") for hosts in (1, 2)}
    assert all(r["images_per_s"] > 0 for r in results["rates"])
    assert set(results["ratios"]) == {
        "folder host of 2 / unsharded", "tfds host of 2 / unsharded", "folder unsharded / reference unsharded",
        "folder first batch at end of epoch / at 0", "tfds first batch at end of epoch / at 0"}
    assert len(results["targets"]) == 4 and results["targets"]["shuffle buffer holds encoded images"]
    assert results["shuffle"]["tfds"]["buffer_bytes"] < results["shuffle"]["tfds"]["same_images_decoded_bytes"]
