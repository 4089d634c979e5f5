"""The paper's evaluations (keras_vit.evaluation): ReaL, k-NN and the linear
probe against independent implementations written here; VTAB-1k's 19 tasks
against task_adaptation's definitions, read through TFDS's own features
with mock examples; ImageNet-A/-R and ReaL scoring through a model; and the
benchmarks' runner with its results, its resumption and its command line."""

import json
import pathlib

import numpy as np
import pytest
from helpers import fails

from keras_vit.evaluation import metrics
from keras_vit.training import linear_few_shot_accuracy

HERE = pathlib.Path(__file__).parent


# -- scores against independent implementations --------------------------------

def real_by_hand(top1, sets):
    right = scored = 0
    for prediction, labels in zip(top1, sets):
        if labels:
            scored += 1
            right += prediction in labels
    return right / scored


def knn_by_hand(train, train_labels, test, k, temperature, num_classes):
    """DINO's k-NN, one test image at a time: a full sort, a dict of votes."""
    predictions = []
    for row in test:
        similarity = [float(row @ x) / (np.linalg.norm(row) * np.linalg.norm(x)) for x in train]
        order = sorted(range(len(train)), key=lambda i: -similarity[i])[:k]
        votes = {c: 0.0 for c in range(num_classes)}
        for i in order:
            votes[int(train_labels[i])] += np.exp(similarity[i] / temperature)
        predictions.append(max(range(num_classes), key=lambda c: (votes[c], -c)))
    return np.array(predictions)


@pytest.mark.backend_independent
def test_real_accuracy_is_an_independent_count():
    rng = np.random.default_rng(0)
    sets = [sorted(set(rng.integers(0, 10, rng.integers(0, 4)).tolist())) for _ in range(300)]
    logits = rng.normal(size=(300, 10))
    top1 = logits.argmax(-1)
    expected = real_by_hand(top1.tolist(), sets)
    assert metrics.real_accuracy(logits, sets) == pytest.approx(expected)
    assert metrics.real_accuracy(top1, sets) == pytest.approx(expected)
    for bad, message in (((top1[:5], sets), "5 predictions and 300"),
                         ((top1, [[]] * 300), "Every image's set of real labels is empty"),
                         ((logits.astype("float32")[:, 0], sets), "top-1 class ids")):
        with pytest.raises(ValueError, match=message):
            metrics.real_accuracy(*bad)


@pytest.mark.backend_independent
def test_the_shipped_real_labels_are_reassessed_imagenets():
    from keras_vit.evaluation import imagenet_real_labels
    import hashlib

    path = HERE.parent / "keras_vit" / "evaluation" / "data" / "imagenet_real_labels.json"
    # google-research/reassessed-imagenet real.json at bcd006fe, byte for byte
    assert hashlib.sha256(path.read_bytes()).hexdigest() == (
        "d83e9bff374c631aae8439eb064c7019acc56e1b3bc3f56b8380c2a710b0220b")
    labels = imagenet_real_labels()
    assert len(labels) == 50_000 and sum(1 for x in labels if x) == 46_837
    assert labels[:3] == [[], [970, 795], [230, 231]]


@pytest.mark.backend_independent
@pytest.mark.parametrize("k", [1, 5, 20])
def test_knn_is_dinos_weighted_vote(k):
    rng = np.random.default_rng(k)
    centres = rng.normal(size=(4, 6))
    train_labels = rng.integers(0, 4, 60)
    train = centres[train_labels] + 0.8 * rng.normal(size=(60, 6))
    test_labels = rng.integers(0, 4, 25)
    test = centres[test_labels] + 0.8 * rng.normal(size=(25, 6))
    expected = knn_by_hand(train, train_labels, test, k, 0.07, 4)
    np.testing.assert_array_equal(metrics.knn_predictions(train, train_labels, test, k, 0.07, 4, chunk=7),
                                  expected)
    assert metrics.knn_accuracy(train, train_labels, test, test_labels, k) == pytest.approx(
        (expected == test_labels).mean())
    with pytest.raises(ValueError, match="k=61: it must be between 1 and the 60"):
        metrics.knn_accuracy(train, train_labels, test, test_labels, k=61)


@pytest.mark.backend_independent
def test_the_linear_probe_chooses_c_on_held_out_images_and_refits():
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    centres = rng.normal(size=(3, 10))
    y = rng.integers(0, 3, 120)
    x = centres[y] + 1.2 * rng.normal(size=(120, 10))
    test_y = rng.integers(0, 3, 60)
    test_x = centres[test_y] + 1.2 * rng.normal(size=(60, 10))
    result = metrics.linear_probe(x, y, test_x, test_y, c_grid=(1e-4, 1e-2, 1.0))
    assert metrics.linear_probe_accuracy(x, y, test_x, test_y, c_grid=(1e-4, 1e-2, 1.0)) == result["accuracy"]
    assert result["C"] in (1e-4, 1e-2, 1.0) and 0 <= result["validation_accuracy"] <= 1
    scaler = StandardScaler().fit(x)  # the chosen C, fitted on every training image
    probe = LogisticRegression(C=result["C"], max_iter=1000).fit(scaler.transform(x), y)
    assert result["accuracy"] == pytest.approx(probe.score(scaler.transform(test_x), test_y))
    assert result["accuracy"] > 0.8
    with pytest.raises(ValueError, match="at least two classes"):
        metrics.linear_probe_accuracy(x, np.zeros(120, int), test_x, test_y)


def _spoiled(shape, count, value=np.nan, seed=0):
    """Normal features of `shape`, `count` of them set to `value`."""
    features = np.random.default_rng(seed).normal(size=shape)
    features.flat[:count] = value
    return features


FEATURES, TEST_FEATURES = _spoiled((40, 6), 0), _spoiled((10, 6), 0, seed=1)
LABELS, TEST_LABELS = np.arange(40) % 4, np.arange(10) % 4
# (id, the score on non-finite values, the argument named, how many values of how many)
NON_FINITE = [
    ("knn-nan-test", lambda: metrics.knn_accuracy(FEATURES, LABELS, _spoiled((10, 6), 3), TEST_LABELS, k=5),
     "test_features", "3", "60"),
    ("knn-inf-train", lambda: metrics.knn_accuracy(_spoiled((40, 6), 1, np.inf), LABELS, TEST_FEATURES,
                                                   TEST_LABELS, k=5), "train_features", "1", "240"),
    ("probe-nan-train", lambda: metrics.linear_probe_accuracy(_spoiled((40, 6), 2), LABELS, TEST_FEATURES,
                                                              TEST_LABELS), "train_features", "2", "240"),
    ("probe-nan-test", lambda: metrics.linear_probe_accuracy(FEATURES, LABELS, _spoiled((10, 6), 60),
                                                             TEST_LABELS), "test_features", "60", "60"),
    ("real-nan-logits", lambda: metrics.real_accuracy(_spoiled((3, 10), 1), [[1], [2], [3]]),
     "predictions", "1", "30"),
    ("top-k-inf-logits", lambda: metrics.top_k_accuracy(_spoiled((3, 10), 2, -np.inf), [1, 2, 3], 5),
     "logits", "2", "30"),
    ("subset-nan-logits", lambda: metrics.subset_predictions(_spoiled((2, 20), 4), [1, 5]),
     "logits", "4", "40"),
    ("few-shot-nan-train", lambda: linear_few_shot_accuracy(_spoiled((40, 6), 5), LABELS, TEST_FEATURES,
                                                            TEST_LABELS, 4), "train_features", "5", "240"),
]


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", NON_FINITE, ids=[case[0] for case in NON_FINITE])
def test_a_score_of_non_finite_values_is_refused(case):
    """Features or logits holding NaN or infinity are refused by every
    score, not scored: the error names the argument, how many of its values
    are not finite, and the likely cause."""
    _, score, name, bad, total = case
    with pytest.raises(ValueError, match=rf"^{name} holds {bad} non-finite values \(NaN or infinity\) of "
                       rf"{total}, so no score of them means anything\. The likely cause is the model "
                       r"that computed them: weights that diverged in training.*Check that its outputs are"):
        score()


@pytest.mark.backend_independent
def test_imagenet_a_and_r_score_their_200_classes():
    from keras_vit.evaluation import IMAGENET_A_INDICES
    from keras_vit.evaluation import IMAGENET_R_INDICES

    for indices in (IMAGENET_A_INDICES, IMAGENET_R_INDICES):
        assert len(indices) == len(set(indices)) == 200 and list(indices) == sorted(indices)
        assert 0 <= indices[0] and indices[-1] < 1000
    assert IMAGENET_A_INDICES[:3] == (6, 11, 13) and IMAGENET_R_INDICES[:3] == (1, 2, 4)
    logits = np.zeros((2, 1000))
    logits[0, 0], logits[0, 6] = 9.0, 1.0  # class 0 is not covered: the best covered one wins
    logits[1, 11] = 5.0
    np.testing.assert_array_equal(metrics.subset_predictions(logits, IMAGENET_A_INDICES), [6, 11])


# -- VTAB-1k, as google-research/task_adaptation defines it -------------------

# task: (TFDS builder, classes, group, train800, val200, test), the splits as
# task_adaptation computes them from its tests' split sizes (d7630d3c)
TASK_ADAPTATION = {
    "caltech101": ("caltech101:3.*.*", 102, "natural", "train[:800]", "train[2754:2954]", "test"),
    "cifar100": ("cifar100:3.*.*", 100, "natural", "train[:800]", "train[45000:45200]", "test"),
    "dtd": ("dtd:3.*.*", 47, "natural", "train[:800]", "validation[:200]", "test"),
    "oxford_flowers102": ("oxford_flowers102:2.*.*", 102, "natural", "train[:800]", "validation[:200]",
                          "test"),
    # task_adaptation's 3.*.*: TFDS 4.9 builds 4.0.0 alone
    "oxford_iiit_pet": ("oxford_iiit_pet:4.*.*", 37, "natural", "train[:800]", "train[2944:3144]", "test"),
    "sun397": ("sun397/tfds:4.*.*", 397, "natural", "train[:800]", "validation[:200]", "test"),
    "svhn": ("svhn_cropped:3.*.*", 10, "natural", "train[:800]", "train[65931:66131]", "test"),
    "patch_camelyon": ("patch_camelyon:2.*.*", 2, "specialized", "train[:800]", "validation[:200]", "test"),
    "eurosat": ("eurosat/rgb:2.*.*", 10, "specialized", "train[:800]", "train[16200:16400]", "train[21600:]"),
    "resisc45": ("resisc45:3.*.*", 45, "specialized", "train[:800]", "train[18900:19100]", "train[25200:]"),
    "diabetic_retinopathy": ("diabetic_retinopathy_detection/btgraham-300:3.*.*", 5, "specialized",
                             "train[:800]", "validation[:200]", "test"),
    "clevr_count": ("clevr:3.*.*", 8, "structured", "train[:800]", "train[63000:63200]", "validation"),
    "clevr_distance": ("clevr:3.*.*", 6, "structured", "train[:800]", "train[63000:63200]", "validation"),
    "dmlab": ("dmlab:2.0.1", 6, "structured", "train[:800]", "validation[:200]", "test"),
    "kitti_distance": ("kitti:3.1.0", 4, "structured", "train[:800]", "validation[:200]", "test"),
    "dsprites_location": ("dsprites:2.*.*", 16, "structured", "train[:800]", "train[589824:590024]",
                          "train[663552:]"),
    "dsprites_orientation": ("dsprites:2.*.*", 16, "structured", "train[:800]", "train[589824:590024]",
                             "train[663552:]"),
    "smallnorb_azimuth": ("smallnorb:2.*.*", 18, "structured", "train[:800]", "test[:200]", "test[50%:]"),
    "smallnorb_elevation": ("smallnorb:2.*.*", 9, "structured", "train[:800]", "test[:200]", "test[50%:]"),
}


@pytest.mark.backend_independent
def test_the_19_vtab_tasks_are_task_adaptations():
    import tensorflow_datasets as tfds

    from keras_vit.evaluation import VTAB_TASKS

    assert list(VTAB_TASKS) == list(TASK_ADAPTATION)
    for name, (dataset, classes, group, train800, val200, test) in TASK_ADAPTATION.items():
        task = VTAB_TASKS[name]
        assert (task.dataset, task.num_classes, task.group) == (dataset, classes, group), name
        assert [task.split(s) for s in ("train800", "val200", "test")] == [train800, val200, test], name
        assert task.split("train800val200") == f"{train800}+{val200}"
        features = tfds.builder(dataset).info.features  # the builder's own features, from its code
        assert "image" in features, name
        key = getattr(task.label, "feature", None)
        if key:
            assert features[key].num_classes >= classes, name
    # the percentages are of the sizes TFDS records once the data is prepared
    assert VTAB_TASKS["svhn"].split("val200", {"train": 1000}) == "train[900:1100]"


@pytest.mark.backend_independent
def test_a_vtab_task_or_split_that_is_not_there_is_named():
    """A position, or a name of no task, in `VTAB_TASKS` raises a KeyError
    that names the tasks and says to index by name; a split of no name
    raises a ValueError that names the splits."""
    from keras_vit.evaluation import VTAB_TASKS

    for key in (0, "cifar"):
        with pytest.raises(KeyError, match=rf"VTAB_TASKS has no task {key!r}: it is keyed by the task's "
                           r"name, one of caltech101, cifar100, .*, smallnorb_elevation\. Index it by name, "
                           r"e\.g\. VTAB_TASKS\['caltech101'\]; list\(VTAB_TASKS\.values\(\)\) gives"):
            VTAB_TASKS[key]
    assert VTAB_TASKS.get(0) is None and 0 not in VTAB_TASKS  # a mapping as before
    with pytest.raises(ValueError, match=r"^VTAB task 'dtd' has no split 'train900': its splits are train800, "
                       r"val200, train800val200, train, val, trainval, test \(the 1,000 examples"):
        VTAB_TASKS["dtd"].split("train900")


def fake_value(feature, rng, length=3):
    """A value for one TFDS feature, as its encoder takes it."""
    import tensorflow_datasets as tfds

    if isinstance(feature, tfds.features.FeaturesDict):
        return {key: fake_value(child, rng, length) for key, child in feature.items()}
    if isinstance(feature, tfds.features.Sequence):
        return [fake_value(feature.feature, rng, length) for _ in range(length)]
    if isinstance(feature, tfds.features.Image):
        shape = tuple(d or 20 for d in feature.shape)
        return rng.integers(0, 256, shape, dtype=np.uint8)
    if isinstance(feature, tfds.features.ClassLabel):
        return int(rng.integers(0, feature.num_classes))
    if isinstance(feature, tfds.features.BBoxFeature):
        return tfds.features.BBox(0.1, 0.2, 0.5, 0.6)
    if isinstance(feature, tfds.features.Text):
        return "text"
    shape = tuple(d or 2 for d in feature.shape)
    dtype = np.dtype(feature.np_dtype)
    if dtype == bool:
        return np.zeros(shape, bool)
    return rng.uniform(0, 5, shape).astype(dtype) if dtype.kind == "f" else np.ones(shape, dtype)


def task_examples(name, features, count=12):
    """`count` examples of a task's TFDS dataset, with the values its label
    reads set, and the label task_adaptation gives each."""
    rng = np.random.default_rng(0)
    examples, labels = [], []
    for i in range(count):
        if name.startswith("clevr"):
            objects = 3 + i % 8
            example = fake_value(features, rng, objects)
            depths = [7.5, 8.2, 8.7, 9.2, 9.7, 11.0][i % 6] + np.arange(objects)
            for j, item in enumerate(example["objects"]):
                item["pixel_coords"] = np.array([1.0, 2.0, depths[j]], "float32")
            label = objects - 3 if name == "clevr_count" else i % 6
        elif name == "kitti_distance":
            # (types, depths): the closest car, van or truck (types 0-2) in 3 bins, 3 for none
            types, depths, label = [([4, 1], [2.0, 30.0], 2), ([0, 2], [9.0, 5.0], 0),
                                    ([3, 3], [1.0, 1.0], 3), ([1, 6], [15.0, 1.0], 1)][i % 4]
            example = fake_value(features, rng, 2)
            for item, kind, depth in zip(example["objects"], types, depths):
                item["type"], item["location"] = kind, np.array([0.0, 0.0, depth], "float32")
        elif name.startswith("dsprites"):
            example = fake_value(features, rng)
            example["image"] = rng.integers(0, 2, (64, 64, 1), dtype=np.uint8)
            key, values = (("label_x_position", 32) if name.endswith("location")
                           else ("label_orientation", 40))
            example[key] = i * 7 % values
            label = int(np.floor(example[key] / (values / 16)))  # 32 -> 16 bins of 2, 40 -> 16 of 2.5
        else:
            example = fake_value(features, rng)
            key = "label_azimuth" if name == "smallnorb_azimuth" else (
                "label_elevation" if name == "smallnorb_elevation" else "label")
            label = example[key]
        examples.append(example)
        labels.append(label)
    return examples, labels


def mock_task(name, examples):
    """tfds.testing.mock_data with these examples, through TFDS's own
    encoding and decoding of the builder's features."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    def as_dataset(builder, split=None, decoders=None, **kwargs):
        features = builder.info.features
        serialized = [features.serialize_example(features.encode_example(e)) for e in examples]
        return tf.data.Dataset.from_tensor_slices(serialized).map(
            lambda s: features.deserialize_example(s, decoders=decoders))

    return tfds.testing.mock_data(as_dataset_fn=as_dataset)


@pytest.mark.backend_independent
def test_each_vtab_task_reads_its_images_and_labels_through_tfds():
    import tensorflow_datasets as tfds

    from keras_vit.data import load_source
    from keras_vit.evaluation import VTAB_TASKS

    for name, task in VTAB_TASKS.items():
        features = tfds.builder(task.dataset).info.features
        examples, labels = task_examples(name, features)
        with mock_task(name, examples):
            source = load_source(f"vtab/{name}", "train800val200")
            read = list(source.dataset.as_numpy_iterator())
        assert (source.name, source.split, source.num_classes) == (f"vtab/{name}", "train800val200",
                                                                   task.num_classes), name
        assert [int(r["label"]) for r in read] == labels, name
        images = [r["image"] for r in read]
        assert all(i.ndim == 3 and i.shape[-1] == 3 and i.dtype == np.uint8 for i in images), name
        if name.startswith("dsprites"):  # 0/1 pixels, tiled to RGB and scaled to 0/255
            np.testing.assert_array_equal(images[0], np.repeat(examples[0]["image"], 3, -1) * 255)
        if name == "smallnorb_elevation":  # grayscale repeated to RGB
            np.testing.assert_array_equal(images[0], np.repeat(examples[0]["image"], 3, -1))


# -- the benchmarks through a model ---------------------------------------------

def tiny_vit(**options):
    from keras_vit import ViT

    return ViT(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
               **options)


@pytest.mark.slow
def test_real_a_and_transfer_score_the_right_images(tmp_path):
    """A model whose logits are its head's bias (the head's kernel is zero)
    predicts one class everywhere: its ReaL accuracy is the share of the
    images' shipped label sets holding that class, found by file name."""
    import tensorflow_datasets as tfds

    from keras_vit.evaluation import IMAGENET_A_INDICES
    from keras_vit.evaluation import evaluate_protocols
    from keras_vit.evaluation import imagenet_real_labels

    model = tiny_vit(num_classes=1000)
    bias = np.zeros(1000, "float32")
    bias[970], bias[IMAGENET_A_INDICES[5]] = 2.0, 1.0  # 970 wins; among A's classes the 6th
    model.parts.head.bias.assign(bias)
    real = imagenet_real_labels()
    files = [2, 1, 5, 40, 1000, 7, 22]  # 1-based validation file numbers; 1, 22 have empty sets
    rng = np.random.default_rng(0)
    labels = [970, 3, 970, 970, 5, 7, IMAGENET_A_INDICES[5]]

    def examples(features, names):
        out = []
        for number, label in zip(files, labels):
            example = fake_value(features, rng)
            example["label"] = label
            if "file_name" in names:
                example["file_name"] = f"ILSVRC2012_val_{number:08d}.JPEG"
            out.append(example)
        return out

    results = {}
    for name, dataset in (("imagenet,imagenet_real", "imagenet2012"), ("imagenet_a", "imagenet_a")):
        features = tfds.builder(dataset).info.features
        with mock_task(dataset, examples(features, list(features))):
            results.update(evaluate_protocols(model, name, tmp_path / dataset, verbose=0)["benchmarks"])
    assert [results["imagenet"][k] for k in ("top1", "top5")] == [  # one pass over the images
        results["imagenet_real"][k] for k in ("top1", "top5")]
    sets = [real[n - 1] for n in files]
    expected_real = 100 * sum(970 in s for s in sets if s) / sum(1 for s in sets if s)
    assert results["imagenet_real"]["real"] == pytest.approx(expected_real)
    assert results["imagenet_real"]["top1"] == pytest.approx(100 * 3 / 7)
    assert results["imagenet_real"]["top5"] == pytest.approx(100 * 4 / 7)  # and A's 6th class second
    assert results["imagenet_real"]["images"] == 5
    assert results["imagenet_a"]["top1"] == pytest.approx(100 / 7)  # only the last is A's 6th class
    with pytest.raises(ValueError, match="scores an ImageNet-1k classifier's logits; this model has 10"):
        evaluate_protocols(tiny_vit(num_classes=10), "imagenet", tmp_path / "ten", verbose=0)
    # a transfer set: a model with its classes is tested as it is, any other fine-tuned first
    features = tfds.builder("cifar10").info.features
    cifar = [dict(fake_value(features, rng), label=label) for label in (3, 3, 1, 0, 3, 9, 3, 2)]
    ten = tiny_vit(num_classes=10)
    ten.parts.head.bias.assign(np.eye(10, dtype="float32")[3])
    with mock_task("cifar10", cifar):
        tested = evaluate_protocols(ten, "cifar10", tmp_path / "c10", verbose=0)["benchmarks"]["cifar10"]
        tuned = evaluate_protocols(tiny_vit(num_classes=0), "cifar10", tmp_path / "c10-ft", verbose=0,
                                    finetune=dict(image_size=16, batch_size=4, accum_steps=1, steps=2,
                                                  warmup_steps=1))
    assert tested == {"top1": 50.0, "images": 8, "fine_tuned": False, "seconds": tested["seconds"]}
    run = tuned["parts"]["cifar10/lr-0.03/test"]  # Table 4's rate without a sweep: the grid's largest
    assert tuned["benchmarks"]["cifar10"]["top1"] == run["accuracy"] and run["steps"] == 2
    assert (tmp_path / "c10-ft" / "runs" / "cifar10" / "lr-0.03" / "test" / "model.keras").exists()


@pytest.mark.slow
def test_a_vtab_sweep_resumes_from_the_runs_it_finished(tmp_path, monkeypatch, capsys):
    """k-NN, the probe and a VTAB-style sweep on the digits; killed in its
    second fine-tuning run, the same call runs the rest alone; a finished
    evaluation runs nothing again; the command line reads the results."""
    import keras_vit.training
    from keras_vit.cli import main
    from keras_vit.evaluation import evaluate_protocols
    from keras_vit.evaluation import knn_accuracy
    from keras_vit.training.scoring import predict_features
    from keras_vit.data import input_pipeline

    model = tiny_vit(num_classes=10)  # its features are what the head reads
    train = keras_vit.training.train
    calls = []

    def counted(config, workdir, **kwargs):
        calls.append((config.base_lr, config.train_split, config.eval_split))
        if len(calls) == 2 and kill:
            raise KeyboardInterrupt  # the second run is killed before it starts
        return train(config, workdir, **kwargs)

    monkeypatch.setattr(keras_vit.training, "train", counted)
    arguments = dict(dataset="digits", tasks="digits", sweep=True, lr_grid=[0.01, 0.03], verbose=0,
                     finetune=dict(image_size=16, batch_size=16, accum_steps=1, steps=4, warmup_steps=1))
    kill = True
    with pytest.raises(KeyboardInterrupt):
        evaluate_protocols(model, "knn,vtab1k", tmp_path / "eval", **arguments)
    kill = False
    results = evaluate_protocols(model, "knn,vtab1k", tmp_path / "eval", **arguments)
    assert calls == [(0.01, "train800", "val200"), (0.03, "train800", "val200"),
                     (0.03, "train800", "val200"), (results["benchmarks"]["vtab1k"]["tasks"]["digits"]["lr"],
                                                    "train800val200", "test")]
    assert sorted(results["parts"]) == sorted(
        ["vtab1k/digits/lr-0.01/val200", "vtab1k/digits/lr-0.03/val200",
         f"vtab1k/digits/lr-{results['benchmarks']['vtab1k']['tasks']['digits']['lr']}/test"])
    digits = results["benchmarks"]["vtab1k"]["tasks"]["digits"]
    val = digits["val200"]
    assert digits["lr"] == min((lr for lr in (0.01, 0.03) if val[str(lr)] == max(val.values())))
    vtab = results["benchmarks"]["vtab1k"]
    assert vtab["mean"] == vtab["natural"] == digits["top1"]
    # the k-NN's number is DINO's k-NN on the model's features
    features = [predict_features(model, input_pipeline("digits", split, image_size=16, batch_size=64,
                                                       training=False)) for split in ("train", "test")]
    assert results["benchmarks"]["knn"]["top1"] == pytest.approx(
        100 * knn_accuracy(*features[0], *features[1]))
    calls.clear()
    assert evaluate_protocols(model, "knn,vtab1k", tmp_path / "eval", **arguments)["benchmarks"] == \
        results["benchmarks"] and calls == []
    with pytest.raises(ValueError, match=r"other settings:\n    sweep: was True, now False"):
        evaluate_protocols(model, "knn", tmp_path / "eval", **{**arguments, "sweep": False})
    with pytest.raises(ValueError, match=r"other settings:\n    model: was 'vit \(weights sha256 "):
        evaluate_protocols(tiny_vit(num_classes=10), "knn", tmp_path / "eval", **arguments)  # new weights
    # keras-vit evaluate --benchmark: the saved model, the table printed
    assert main(["evaluate", str(tmp_path / "eval" / "evaluated_model.keras"), "--benchmark", "knn,linear",
                 "--dataset", "digits", "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    assert "| k-NN (digits) | top-1 | " in printed and "| linear probe (digits) | top-1 |" in printed
    written = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert written["benchmarks"]["knn"]["top1"] == pytest.approx(results["benchmarks"]["knn"]["top1"])


@pytest.mark.backend_independent
def test_the_published_numbers_name_released_weights_benchmarks_and_sources(tmp_path, capsys):
    from keras_vit import cli
    from keras_vit.evaluation import PROTOCOLS
    from keras_vit.evaluation import published_numbers
    from keras_vit.evaluation.protocols import write_table
    from keras_vit.released import PRETRAINED

    assert cli.BENCHMARK_NAMES == tuple(PROTOCOLS)
    numbers = published_numbers()
    assert numbers["models"]
    for name, benchmarks in numbers["models"].items():
        assert name in PRETRAINED, name
        for benchmark, entries in benchmarks.items():
            assert benchmark in PROTOCOLS, (name, benchmark)
            for entry in entries:
                assert entry["source"] in numbers["sources"] and 0 < entry["value"] <= 100, (name, entry)
    # the paper's Table 5 and Table 2 beside ours, with the difference
    assert numbers["models"]["vit_b16.orig_in21k"]["imagenet"][0] == {"value": 83.97, "source": "vit_table5"}
    results = {"settings": {"model": "vit_b16.orig_in21k"}, "benchmarks": {
        "cifar100": {"top1": 91.0}, "imagenet_real": {"real": 88.0, "top1": 84.5},
        "vtab1k": {"tasks": {"dtd": {"top1": 70.0, "group": "natural"}}, "natural": 70.0, "mean": 70.0}}}
    table = write_table(results, tmp_path / "results.md", "vit_b16.orig_in21k").read_text()
    assert "| CIFAR-100 | top-1 | 91.00 | 91.67 | -0.67 | vit_table5 |" in table
    assert "| ImageNet ReaL | ReaL | 88.00 | 88.35 | -0.35 | vit_table5 |" in table
    assert "| ImageNet ReaL | top-1 | 84.50 | 83.97 | +0.53 | vit_table5 |" in table
    assert "| VTAB-1k | mean | 70.00 |  |  |  |" in table and "- vit_table5: Dosovitskiy" in table
    # bad input on the command line: one line that names the fix
    for argv, message in (
            (["evaluate", "m.keras", "--benchmark", "knn"], "give the folder with --out"),
            (["evaluate", "m.keras", "--benchmark", "knn,imagenet_c", "--out", str(tmp_path)],
             "Unknown benchmark 'imagenet_c': choose from imagenet, imagenet_real")):
        fails(argv, capsys, message)


@pytest.mark.backend_independent  # refused before any model is read
def test_the_old_benchmark_names_are_deprecated_aliases_of_the_protocols(tmp_path):
    """`evaluate_benchmarks`, `BENCHMARKS` and `Benchmark` (the protocols'
    names before the speed scripts of benchmarks/ kept the word) stand for
    `evaluate_protocols`, `PROTOCOLS` and `Protocol` for one version."""
    from keras_vit import evaluation

    assert evaluation.BENCHMARKS is evaluation.PROTOCOLS and evaluation.Benchmark is evaluation.Protocol
    with pytest.warns(DeprecationWarning, match="evaluate_benchmarks is deprecated; use "
                      "keras_vit.evaluation.evaluate_protocols"), \
            pytest.raises(ValueError, match="Unknown benchmark 'imagenet_c': choose from imagenet, imagenet_real"):
        evaluation.evaluate_benchmarks("m.keras", "knn,imagenet_c", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.backend_independent
def test_every_benchmark_dataset_reads_through_tfds():
    """Each TFDS builder a benchmark reads, with mock examples of its own
    features: its images, and labels of the classes the protocol expects."""
    import tensorflow_datasets as tfds

    from keras_vit.data import load_source
    from keras_vit.evaluation import PROTOCOLS

    rng = np.random.default_rng(0)
    classes = {"imagenet": 1000, "cifar10": 10, "cifar100": 100, "pets": 37, "flowers": 102}
    for name, benchmark in PROTOCOLS.items():
        if benchmark.dataset is None:
            continue
        features = tfds.builder(benchmark.dataset).info.features
        with mock_task(benchmark.dataset, [fake_value(features, rng) for _ in range(3)]):
            source = load_source(benchmark.dataset, benchmark.split)
            [first] = source.dataset.take(1).as_numpy_iterator()
        assert source.num_classes == classes.get(name, 1000), name
        assert first["image"].ndim == 3 and 0 <= first["label"] < source.num_classes, name
        if benchmark.classes is not None:  # ImageNet-A/-R label with ImageNet's 1,000 ids
            assert len(source.class_names) == 1000
