"""keras_vit.data: sources (digits, TFDS, image folders), the paper's
preprocessing, Keras core augmentations, and determinism across runs,
`start_batch`, epochs and backends."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from helpers import AUGMENT
from helpers import AUGMENTED

from keras_vit.data import DATASETS
from keras_vit.data import Source
from keras_vit.data import input_pipeline
from keras_vit.data import load_source
from keras_vit.data import read_images
from keras_vit.naflex import naflex_inputs

pytestmark = pytest.mark.backend_independent  # tf.data: the same bytes on every backend (test_cross_backend)


def batches(dataset, n):
    return [tuple(np.asarray(t) for t in batch) for batch in dataset.take(n)]


def examples(source):
    return list(source.dataset.as_numpy_iterator())


def write_image(path, array):
    encode = tf.io.encode_png if str(path).endswith(".png") else tf.io.encode_jpeg
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(str(path), encode(array))


def constant_source(n):
    """n 8x8 images, image i filled with the value 20 * i, label i % 2."""
    images = np.stack([np.full((8, 8, 3), 20 * i, "uint8") for i in range(n)])
    dataset = tf.data.Dataset.from_tensor_slices({"image": images, "label": np.arange(n) % 2})
    return Source(dataset, "constant", "train", 2, None, n)


def image_ids(images):
    """The i of constant_source's images, read back from [-1, 1]."""
    return np.round((images[:, 0, 0, 0] + 1) * 127.5 / 20).astype(int).tolist()


# -- digits -------------------------------------------------------------------


def test_digits_splits_are_fixed_disjoint_and_sliceable():
    train, test = load_source("digits", "train"), load_source("digits", "test")
    assert (train.num_examples, test.num_examples) == (1437, 360)
    assert train.num_classes == 10 and train.class_names == [str(i) for i in range(10)]
    train_examples, test_examples = examples(train), examples(test)
    assert len(train_examples) == 1437 and len(test_examples) == 360
    image = train_examples[0]["image"]
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8 and image.max() > 200
    assert np.array_equal(image[..., 0], image[..., 2])
    train_bytes = {e["image"].tobytes() for e in train_examples}
    assert not train_bytes & {e["image"].tobytes() for e in test_examples}
    counts = np.bincount([e["label"] for e in train_examples], minlength=10)
    assert counts.min() > 120 and counts.max() < 170, counts

    head, tail = load_source("digits", "train[:90%]"), load_source("digits", "train[90%:]")
    assert (head.num_examples, tail.num_examples) == (1293, 144)
    sliced = [e["image"].tobytes() for e in examples(head) + examples(tail)]
    assert sliced == [e["image"].tobytes() for e in train_examples]
    first = examples(load_source("digits", "test[:50]"))
    assert [e["label"] for e in first] == [e["label"] for e in test_examples[:50]]
    with pytest.raises(ValueError, match=r"(?s)'validation'.*train \(1437 examples\)"):
        load_source("digits", "validation")


# -- TFDS (offline, mocked) ---------------------------------------------------


@pytest.mark.parametrize(
    "name, split, num_classes, first_class, image_shape",
    [
        ("cifar10", "train[:98%]", 10, "0", (32, 32, 3)),
        ("oxford_flowers102", "train[:90%]", 102, "pink primrose", (None, None, 3)),
        ("imagenet2012", "validation", 1000, "n01440764", (None, None, 3)),
        ("mnist", "test[:50%]", 10, "0", (28, 28, 3)),  # grayscale -> RGB
    ],
)
def test_tfds_source(name, split, num_classes, first_class, image_shape, tmp_path):
    with tfds.testing.mock_data(num_examples=6):
        source = load_source(name, split, data_dir=str(tmp_path))
        assert (source.name, source.split, source.num_examples) == (name, split, 6)
        assert source.num_classes == num_classes and len(source.class_names) == num_classes
        assert source.class_names[0] == first_class
        assert tuple(source.dataset.element_spec["image"].shape) == image_shape
        found = examples(source)
        assert len(found) == 6 and all(e["image"].dtype == np.uint8 for e in found)
        assert all(e["image"].shape[-1] == 3 and 0 <= e["label"] < num_classes for e in found)
        images, labels = batches(input_pipeline(source, image_size=24, batch_size=4, training=True), 2)[1]
        assert images.shape == (4, 24, 24, 3) and labels.shape == (4, num_classes)


def test_tfds_errors(tmp_path):
    with pytest.raises(ValueError, match="(?s)Unknown dataset 'no_such_set'.*cifar10.*one sub-folder"):
        load_source("no_such_set", "train")
    with pytest.raises(RuntimeError, match=f"(?s)imagenet2012.*{re.escape(str(tmp_path))}.*manual"):
        load_source("imagenet2012", "train", data_dir=str(tmp_path))
    assert "cifar10" in DATASETS and "imagenet2012" in DATASETS


# -- image folders --------------------------------------------------------------


@pytest.fixture
def image_folder(tmp_path):
    """cat/: 3 PNGs (RGB 20x30, grayscale 16x16, RGBA 24x12); dog/: 3 JPEGs."""
    rng = np.random.default_rng(0)
    root = tmp_path / "pets"
    write_image(root / "cat" / "a.png", rng.integers(0, 256, (20, 30, 3), dtype="uint8"))
    write_image(root / "cat" / "gray.png", np.full((16, 16, 1), 77, "uint8"))
    rgba = np.concatenate([np.full((24, 12, 3), 200, "uint8"), np.zeros((24, 12, 1), "uint8")], -1)
    write_image(root / "cat" / "rgba.png", rgba)
    for i, shape in enumerate([(40, 40, 3), (33, 21, 3), (64, 48, 1)]):
        write_image(root / "dog" / f"{i}.jpg", rng.integers(0, 256, shape, dtype="uint8"))
    (root / "dog" / "notes.txt").write_text("not an image, ignored")
    return root


def test_image_folder_without_splits(image_folder):
    source = load_source(str(image_folder), "train")
    assert (source.num_classes, source.class_names, source.num_examples) == (2, ["cat", "dog"], 6)
    found = examples(source)
    assert sorted(e["image"].shape for e in found) == sorted(
        [(20, 30, 3), (16, 16, 3), (24, 12, 3), (40, 40, 3), (33, 21, 3), (64, 48, 3)]
    )
    assert sorted(e["label"] for e in found) == [0, 0, 0, 1, 1, 1]
    by_shape = {e["image"].shape: e["image"] for e in found}
    assert (by_shape[(16, 16, 3)] == 77).all() and (by_shape[(24, 12, 3)] == 200).all()
    head, tail = examples(load_source(str(image_folder), "train[:50%]")), examples(
        load_source(str(image_folder), "train[50%:]"))
    assert [e["image"].tobytes() for e in head + tail] == [e["image"].tobytes() for e in found]
    with pytest.raises(ValueError, match="Unknown split 'test'"):
        load_source(str(image_folder), "test")


def test_image_folder_with_splits(tmp_path):
    for split, count in (("train", 3), ("test", 2)):
        for label in ("a", "b"):
            for i in range(count):
                write_image(tmp_path / split / label / f"{i}.png", np.full((8, 8, 3), i, "uint8"))
    train, test = load_source(str(tmp_path), "train"), load_source(str(tmp_path), "test")
    assert (train.num_examples, test.num_examples) == (6, 4)
    assert train.class_names == test.class_names == ["a", "b"]
    assert sorted(e["label"] for e in examples(test)) == [0, 0, 1, 1]
    assert load_source(str(tmp_path), "train+test[:1]").num_examples == 7
    write_image(tmp_path / "test" / "c" / "0.png", np.zeros((8, 8, 3), "uint8"))
    with pytest.raises(ValueError, match=r"test/c has no counterpart among the training classes \['a', 'b'\]"):
        load_source(str(tmp_path), "test")


def test_image_folder_errors(tmp_path, image_folder):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{empty} is empty")):
        load_source(str(empty), "train")
    flat = tmp_path / "flat"
    write_image(flat / "x.png", np.zeros((4, 4, 3), "uint8"))
    with pytest.raises(ValueError, match=re.escape(f"{flat} has no class sub-folders")):
        load_source(str(flat), "train")
    (image_folder / "bird").mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{image_folder / 'bird'} has no images")):
        load_source(str(image_folder), "train")
    (image_folder / "bird" / "broken.jpg").write_bytes(b"this is no JPEG")
    with pytest.raises(ValueError, match=re.escape(f"{image_folder / 'bird' / 'broken.jpg'} is not a JPEG")):
        load_source(str(image_folder), "train")


# -- preprocessing --------------------------------------------------------------


def ramp_source(n=16):
    """n copies of a 48x64 image whose red and blue brighten from left to
    right, and green from top to bottom."""
    ramp = np.tile(np.linspace(0, 255, 64).astype("uint8")[None, :, None], (48, 1, 3))
    ramp[..., 1] = np.linspace(0, 255, 48).astype("uint8")[:, None]
    dataset = tf.data.Dataset.from_tensor_slices({"image": np.stack([ramp] * n), "label": np.zeros(n, "int64")})
    return ramp, Source(dataset, "ramp", "train", 1, None, n)


def test_eval_resize_is_the_papers():
    ramp, source = ramp_source(3)
    images, labels = batches(input_pipeline(source, image_size=(16, 20), batch_size=2, training=False), 2)[0]
    expected = tf.image.resize(ramp, (16, 20)) / 127.5 - 1
    np.testing.assert_allclose(images[0], expected, atol=1e-6)
    assert labels.tolist() == [[1.0], [1.0]]
    evaluation = input_pipeline(source, image_size=8, batch_size=2, training=False)
    assert evaluation.cardinality() == 2
    assert [len(b[0]) for b in batches(evaluation, 5)] == [2, 1]  # one pass, the remainder kept


def test_training_batches_are_static_and_in_range():
    dataset = input_pipeline("digits", "train", image_size=(16, 12), batch_size=32, training=True, **AUGMENT)
    assert [tuple(spec.shape) for spec in dataset.element_spec] == [(32, 16, 12, 3), (32, 10)]
    assert dataset.cardinality() == tf.data.INFINITE_CARDINALITY
    for images, labels in batches(dataset, 3):
        assert images.dtype == np.float32 and -1 <= images.min() and images.max() <= 1


def test_finetune_crops_vary_and_flip_off_never_mirrors():
    ramp, source = ramp_source()
    crops, _ = batches(input_pipeline(source, image_size=16, batch_size=16, training=True,
                                      preprocess="finetune", area_range=(0.05, 1), flip=False), 1)[0]
    assert len({crop.tobytes() for crop in crops}) == 16
    assert (crops[:, :, -1, 0] > crops[:, :, 0, 0]).all()  # left to right brighter: never mirrored
    flipped, _ = batches(input_pipeline(source, image_size=16, batch_size=16, training=True), 1)[0]
    assert (flipped[:, 8, -1, 0] < flipped[:, 8, 0, 0]).any()  # flip=True does mirror some


def test_mixup_and_cutmix_labels_are_soft_and_sum_to_one():
    for kwargs in (dict(mixup=0.8), dict(cutmix=1.0), dict(mixup=0.8, cutmix=1.0)):
        dataset = input_pipeline("digits", "train", image_size=8, batch_size=64, training=True, **kwargs)
        labels = np.concatenate([b[1] for b in batches(dataset, 2)])
        np.testing.assert_allclose(labels.sum(1), 1, atol=1e-5)
        assert (labels.max(1) < 0.99).mean() > 0.2, kwargs
        assert labels.min() >= 0


def test_read_images(image_folder, tmp_path):
    paths = [image_folder / "cat" / "rgba.png", image_folder / "dog" / "2.jpg", image_folder / "cat" / "gray.png"]
    images = read_images(paths, image_size=(10, 12))
    assert images.shape == (3, 10, 12, 3) and images.dtype == np.float32
    np.testing.assert_allclose(images[0], 200 / 127.5 - 1, atol=1e-6)
    np.testing.assert_allclose(images[2], 77 / 127.5 - 1, atol=1e-6)
    assert -1 <= images.min() and images.max() <= 1
    with pytest.raises(FileNotFoundError, match="missing.png"):
        read_images([tmp_path / "missing.png"], 8)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    with pytest.raises(ValueError, match="Cannot decode image file .*broken.png"):
        read_images([broken], 8)


# -- determinism ----------------------------------------------------------------


@pytest.fixture(scope="module")
def augmented_stream():
    """The first 5 batches of AUGMENTED with seed 11."""
    return batches(input_pipeline(seed=11, **AUGMENTED), 5)


@pytest.mark.slow
def test_same_seed_same_batches_whatever_the_global_seed(augmented_stream):
    tf.random.set_seed(123)  # TensorFlow's global seed must not matter
    again = batches(input_pipeline(seed=11, **AUGMENTED), 5)
    other = batches(input_pipeline(seed=12, **AUGMENTED), 2)
    for (x, y), (x2, y2) in zip(augmented_stream, again):
        assert x.tobytes() == x2.tobytes() and y.tobytes() == y2.tobytes()
    for (x, _), (x3, _) in zip(augmented_stream, other):
        assert x.tobytes() != x3.tobytes()


def test_start_batch_continues_the_stream_across_epochs(augmented_stream):
    resumed = batches(input_pipeline(seed=11, start_batch=3, **AUGMENTED), 2)
    for (x, y), (x2, y2) in zip(resumed, augmented_stream[3:]):
        assert x.tobytes() == x2.tobytes() and y.tobytes() == y2.tobytes()

    source = constant_source(10)
    stream = batches(input_pipeline(source, image_size=4, batch_size=4, training=True, seed=3), 10)
    ids = [i for images, _ in stream for i in image_ids(images)]
    epochs = [ids[k:k + 10] for k in range(0, 40, 10)]
    assert all(sorted(epoch) == list(range(10)) for epoch in epochs)  # every epoch a permutation
    assert len({tuple(epoch) for epoch in epochs}) == 4  # reshuffled every epoch
    for start in (2, 5):  # batch 2 spans epochs 0 and 1
        resumed = batches(input_pipeline(source, image_size=4, batch_size=4, training=True, seed=3,
                                         start_batch=start), 3)
        assert [image_ids(x) for x, _ in resumed] == [image_ids(x) for x, _ in stream[start:start + 3]]

    evaluation = batches(input_pipeline(source, image_size=4, batch_size=4, training=False, start_batch=1), 5)
    assert [image_ids(images) for images, _ in evaluation] == [[4, 5, 6, 7], [8, 9]]


# -- arguments and model.fit ------------------------------------------------------


def test_argument_errors():
    source = load_source("digits", "test[:8]")
    cases = [
        (dict(preprocess="center"), "`preprocess` must be one of"),
        (dict(randaugment=(2, 15)), r"magnitude in \[0, 10\]"),
        (dict(cutmix=1.5), "CutMix's factor"),
        (dict(area_range=(0.5, 0.1)), "`area_range`"),
        (dict(batch_size=0), "`batch_size` must be a positive int"),
        (dict(start_batch=-1), "`start_batch`"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            input_pipeline(source, **{"image_size": 8, "batch_size": 4, "training": True, **kwargs})
    with pytest.raises(ValueError, match="`split` .* is for loading a dataset by name"):
        input_pipeline(source, "test", image_size=8, batch_size=4, training=False)
    with pytest.raises(ValueError, match="`split` is required"):
        input_pipeline("digits", image_size=8, batch_size=4, training=False)


def test_a_models_pixel_scaling_makes_the_images(tmp_path):
    """ImageNet's mean and standard deviation (a keras-hub DeiT's converter)
    instead of [-1, 1]: the same pixels, scaled per channel, in the stream
    and, from a file, in read_images."""
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    scaling = dict(pixel_scale=tuple(1 / (255 * std)), pixel_offset=tuple(-mean / std))
    source = load_source("digits", "test")
    common = dict(image_size=16, batch_size=8, training=False)
    paper = next(iter(input_pipeline(source, **common)))[0].numpy()
    imagenet = next(iter(input_pipeline(source, **common, **scaling)))[0].numpy()
    pixels = (paper + 1) * 127.5
    np.testing.assert_allclose(imagenet, pixels * scaling["pixel_scale"] + scaling["pixel_offset"],
                               atol=1e-4)

    class Model:  # what read_images reads off a model
        image_size = (16, 16)
        pixel_scale, pixel_offset = scaling["pixel_scale"], scaling["pixel_offset"]

    image = np.random.default_rng(0).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    path = str(tmp_path / "image.png")
    tf.io.write_file(path, tf.io.encode_png(image))
    np.testing.assert_allclose(read_images(path, model=Model())[0],
                               image * scaling["pixel_scale"] + scaling["pixel_offset"], atol=1e-5)
    with pytest.raises(ValueError, match="needs an image_size, or a model"):
        read_images(path)

    class NaFlexModel(Model):  # a NaFlex model: the images at their own sizes, as its sequences
        naflex, patch_size, max_num_patches = True, (4, 4), 6

    wide = image[:8]
    tf.io.write_file(path, tf.io.encode_png(wide))
    sequences = read_images(path, model=NaFlexModel())
    expected = naflex_inputs([wide], (4, 4), 6, scaling["pixel_scale"], scaling["pixel_offset"])
    assert sorted(sequences) == sorted(expected)
    for key in expected:
        np.testing.assert_allclose(sequences[key], expected[key], atol=1e-6)
