"""Images per second of keras_vit's training input pipeline, per host.

It writes a folder of JPEGs of ImageNet-like sizes (300-500 x 375-500 px,
10 classes) and the same images as a TFDS dataset it prepares, then measures
`keras_vit.data.input_pipeline` (the 224 px Inception crop, training) on
both: unsharded, and the pipeline of one host of N (``shard=(0, N)``) for
each N of ``--shards``, all in one process. A plain tf.data pipeline of the
kind big_vision uses (files split per host, encoded bytes shuffled, only the
crop decoded) is measured in the same run as the reference. It also reports
what the shuffle buffer holds and the time to the first batch at batch 0 and
when resuming at the last batch of the first epoch.

    python benchmarks/input_pipeline.py --images 1200 --image-size 224 --batch-size 64 \
        --shards 1,2,4,8 --json benchmarks/results/input_pipeline.json

Rates are of each pipeline's own rows: a host of N yields batch / N rows
per global batch. Each rate is the median over ``--runs`` rounds of one
timed pass over ``--images`` rows of a freshly built pipeline, after its
first batch (timed apart) and a warm-up pass; every round measures every
pipeline in turn, so the machine's drift hits all alike.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

NUM_CLASSES = 10
TARGETS = {"per_shard_vs_unsharded": 0.9, "unsharded_vs_reference": 1.0, "resume_vs_start": 1.5}


# -- data ---------------------------------------------------------------------

def make_images(count, seed=0, heights=(300, 500), widths=(375, 500)):
    """`count` (image, label) pairs: uint8 (H, W, 3) of ImageNet-like sizes,
    smooth shapes with some noise (JPEG-typical content, not white noise)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    for i in range(count):
        height, width = int(rng.integers(*heights, endpoint=True)), int(rng.integers(*widths, endpoint=True))
        coarse = rng.uniform(0, 255, (8, 10, 3)).astype("float32")
        image = tf.image.resize(coarse, (height, width), method="bicubic").numpy()
        image += rng.normal(0, 8, image.shape)
        yield np.clip(image, 0, 255).astype("uint8"), i % NUM_CLASSES


def write_jpeg_folder(root, count, seed=0, **sizes):
    """An image folder (root/<class>/<i>.jpg, quality 90) of `count` images
    of `make_images`; returns `root`."""
    import tensorflow as tf

    for i, (image, label) in enumerate(make_images(count, seed, **sizes)):
        folder = os.path.join(root, f"class_{label}")
        os.makedirs(folder, exist_ok=True)
        tf.io.write_file(os.path.join(folder, f"{i:06d}.jpg"), tf.io.encode_jpeg(image, quality=90))
    return root


def prepare_tfds(data_dir, count, seed=0, name="vit_bench_images", **sizes):
    """Prepares a TFDS dataset `name` (a "train" split of `count` JPEG
    images of `make_images`, class labels) in `data_dir`, as `tfds build`
    would, with no download; `tfds.builder(name, data_dir=data_dir)` then
    reads it. Returns `name`."""
    import tensorflow_datasets as tfds

    class Images(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
                "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
                "label": tfds.features.ClassLabel(num_classes=NUM_CLASSES),
            }))

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples()}

        def _generate_examples(self):
            for i, (image, label) in enumerate(make_images(count, seed, **sizes)):
                yield i, {"image": image, "label": label}

    Images.name = name
    Images(data_dir=data_dir).download_and_prepare()
    return name


# -- the reference: a plain tf.data pipeline ----------------------------------

def reference_pipeline(root, image_size, batch_size, shard=(0, 1), shuffle_buffer=10_000, seed=0):
    """The pipeline big_vision's recipe gives: this host's files, encoded
    bytes shuffled, the Inception crop decoded alone, flipped, batched."""
    import tensorflow as tf

    index, count = shard
    files = sorted(tf.io.gfile.glob(os.path.join(root, "*", "*.jpg")))[index::count]
    classes = sorted(os.listdir(root))
    labels = [classes.index(os.path.basename(os.path.dirname(path))) for path in files]

    def crop(contents, label):
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.io.extract_jpeg_shape(contents), tf.zeros([0, 0, 4]), min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        image = tf.io.decode_and_crop_jpeg(contents, window, channels=3)
        image = tf.image.resize(image, (image_size, image_size))
        image = tf.image.random_flip_left_right(image) / 127.5 - 1.0
        return image, tf.one_hot(label, len(classes))

    def read(path, label):
        return tf.io.read_file(path), label

    dataset = tf.data.Dataset.from_tensor_slices((files, labels)).map(read, tf.data.AUTOTUNE)
    dataset = dataset.shuffle(shuffle_buffer, seed=seed).repeat()
    dataset = dataset.map(crop, tf.data.AUTOTUNE).batch(batch_size // count, drop_remainder=True)
    return dataset.prefetch(tf.data.AUTOTUNE)


# -- measuring ----------------------------------------------------------------

def measure(make, rows_per_pass):
    """(seconds to the first batch, images/s over a pass of `rows_per_pass`
    rows after a warm-up pass of as many, while tf.data's autotuning
    settles) of the dataset `make()` builds."""
    start = time.perf_counter()
    iterator = iter(make())
    rows = len(next(iterator)[0])
    first = time.perf_counter() - start
    for _ in range(max(1, rows_per_pass // rows)):
        next(iterator)
    batches = max(1, -(-rows_per_pass // rows))
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return first, batches * rows / (time.perf_counter() - start)


def first_batch_seconds(make):
    start = time.perf_counter()
    next(iter(make()))
    return time.perf_counter() - start


def shuffle_memory(source, shuffle_buffer):
    """What the shuffle of `source` holds: bytes of the encoded records in
    its buffer (none with random access), against the same images decoded."""
    import tensorflow as tf

    encoded, decoded = 0, 0
    for record in source.records.take(min(shuffle_buffer, source.num_examples)).as_numpy_iterator():
        contents = record["image"] if source.encoding == "bytes" else tf.io.read_file(record["image"]).numpy()
        encoded += len(contents)
        decoded += int(np.prod(tf.io.extract_jpeg_shape(contents).numpy()[:2])) * 3
    random_access = source.table is not None
    return {"holds": "indices (random access, no buffer)" if random_access else "encoded images",
            "buffer_bytes": 0 if random_access else encoded, "same_images_decoded_bytes": decoded}


def run(args):
    import tensorflow as tf

    from keras_vit.data import input_pipeline
    from keras_vit.data import load_source

    workdir = args.work or tempfile.mkdtemp(prefix="vit_input_bench_")
    folder = os.path.join(workdir, "jpegs")
    if not os.path.isdir(folder):
        write_jpeg_folder(folder, args.images)
    data_dir = os.path.join(workdir, "tfds")
    name = prepare_tfds(data_dir, args.images)
    sources = {"folder": load_source(folder, "train"), "tfds": load_source(name, "train", data_dir=data_dir)}
    common = dict(image_size=args.image_size, batch_size=args.batch_size, training=True, preprocess="inception")
    results = {"rates": [], "first_batch": {}, "shuffle": {}}

    def ours(source, count, **extra):
        return lambda: input_pipeline(source, **common, shard=None if count == 1 else (0, count), **extra)

    pipelines = {f"keras_vit {kind}": (lambda count, source=source: ours(source, count))
                 for kind, source in sources.items()}
    pipelines["reference folder"] = lambda count: lambda: reference_pipeline(
        folder, args.image_size, args.batch_size, (0, count))
    timings = {}
    for round_ in range(args.runs):  # rounds interleave the pipelines: drift hits all alike
        for name, make in pipelines.items():
            for count in args.shards:
                timings.setdefault((name, count), []).append(measure(make(count), args.images))
        print(f"round {round_ + 1} of {args.runs} done", flush=True)
    for (name, count), runs in timings.items():
        first, rate = statistics.median(t[0] for t in runs), statistics.median(t[1] for t in runs)
        results["rates"].append({"pipeline": name, "hosts": count, "images_per_s": rate, "first_batch_s": first})
        print(f"{name:17s} host 1 of {count}: {rate:7.0f} images/s of its rows (first batch {first:.2f} s)")

    last = -(-args.images // args.batch_size) - 1  # the last batch of the first epoch
    for kind, source in sources.items():
        at = {start: statistics.median(first_batch_seconds(ours(source, 1, start_batch=start))
                                       for _ in range(args.runs)) for start in (0, last)}
        results["first_batch"][kind] = {"batch_0_s": at[0], f"batch_{last}_s": at[last],
                                        "ratio": at[last] / at[0]}
        results["shuffle"][kind] = shuffle_memory(source, 10_000)
        print(f"keras_vit {kind:7s} first batch at 0: {at[0]:.2f} s, at {last} (end of epoch 0): "
              f"{at[last]:.2f} s ({at[last] / at[0]:.2f}x); shuffle holds "
              f"{results['shuffle'][kind]['holds']}, {results['shuffle'][kind]['buffer_bytes'] / 1e6:.1f} MB",
              flush=True)

    rate = {(r["pipeline"], r["hosts"]): r["images_per_s"] for r in results["rates"]}
    ratios = {}
    for kind in sources:
        for count in args.shards[1:]:
            ratios[f"{kind} host of {count} / unsharded"] = rate[f"keras_vit {kind}", count] / rate[
                f"keras_vit {kind}", args.shards[0]]
    ratios["folder unsharded / reference unsharded"] = (rate["keras_vit folder", args.shards[0]]
                                                       / rate["reference folder", args.shards[0]])
    for kind in sources:
        ratios[f"{kind} first batch at end of epoch / at 0"] = results["first_batch"][kind]["ratio"]
    results["ratios"] = ratios
    results["targets"] = {
        "per_shard_vs_unsharded >= 0.9": all(v >= TARGETS["per_shard_vs_unsharded"]
                                             for k, v in ratios.items() if "/ unsharded" in k),
        "unsharded_vs_reference >= 1.0": ratios["folder unsharded / reference unsharded"]
        >= TARGETS["unsharded_vs_reference"],
        "resume_vs_start <= 1.5": all(v <= TARGETS["resume_vs_start"]
                                      for k, v in ratios.items() if "first batch" in k),
        "shuffle buffer holds encoded images": all(
            s["holds"] != "decoded images" for s in results["shuffle"].values()),
    }
    results["config"] = {"images": args.images, "image_size": args.image_size, "batch_size": args.batch_size,
                         "shards": args.shards, "runs": args.runs,
                         "backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
                         "tensorflow": tf.__version__, "cpus": os.cpu_count(),
                         "machine": platform.processor() or platform.machine()}
    print("\nratios (one run):")
    for key, value in ratios.items():
        print(f"  {key:45s} {value:.2f}")
    for key, met in results["targets"].items():
        print(f"  target {key:38s} {'met' if met else 'NOT met'}")
    if not args.work:
        shutil.rmtree(workdir, ignore_errors=True)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=1200, help="images written (default 1200)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=64, help="the global batch")
    parser.add_argument("--shards", default="1,2,4,8", help="host counts simulated, comma list (first: 1)")
    parser.add_argument("--runs", type=int, default=3, help="rounds; each measurement is their median")
    parser.add_argument("--work", help="keep the images here (reused when present) instead of a temp folder")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    args.shards = [int(n) for n in args.shards.split(",")]
    if args.shards[0] != 1 or any(n < 1 or args.batch_size % n for n in args.shards):
        parser.error(f"--shards must start with 1 and divide --batch-size {args.batch_size}, got {args.shards}")
    if args.images < args.batch_size:
        parser.error(f"--images {args.images} must be at least --batch-size {args.batch_size}")
    results = run(args)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
