"""The public entry points of zero-shot classification, the two-tower model,
its tokenizers and the keras-hub preset reader check their arguments as
`keras_vit.ViT` does: each wrong argument, and each file that cannot be
read, raises an error whose message names what was given, what was
expected and what to do.

Argument checks done before any tensor operation, and file reading, are
backend-independent; the checks of `ImageTextModel`'s computations
(`encode_text`, `similarity`, `logits`, `call`) run on every backend."""

import json
import re
import shutil

import keras
import numpy as np
import pytest

from keras_vit import ImageTextModel
from keras_vit import TextTokenizer
from keras_vit import TextTransformer
from keras_vit import ViT
from keras_vit import zero_shot_classifier
from keras_vit.data.captions import caption_tokenizer
from keras_vit.weights import CheckpointError
from keras_vit.weights.keras_hub import read_keras_hub
from keras_vit.zero_shot import class_embeddings
from keras_vit.zero_shot import prompt_templates

CONTEXT = 8  # the tiny text tower's positions
IMAGE_TOWER = dict(image_size=16, patch_size=4, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                   num_classes=0, projection_dim=8)
TEXT_TOWER = dict(context_length=CONTEXT, hidden_dim=16, num_layers=1, num_heads=2, mlp_dim=32,
                  projection_dim=8, pooling="eos", eos_token_id=2)


def tiny_image_text_model():
    """A two-tower model of 8-D embeddings with the word-level tokenizer of
    `keras_vit.data.captions` (28 ids), as `ImageTextModel`'s example."""
    tokenizer = caption_tokenizer(context_length=CONTEXT)
    text = TextTransformer(vocab_size=tokenizer.vocab_size, **TEXT_TOWER)
    return ImageTextModel(ViT(**IMAGE_TOWER), text, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def model():
    return tiny_image_text_model()


IDS = np.array([[1, 23, 7, 20, 4, 2, 0, 0], [1, 5, 13, 25, 4, 2, 0, 0]], np.int32)
IMAGES = np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")


def with_id(ids, row, position, value):
    ids = ids.copy()
    ids[row, position] = value
    return ids


# (id, call on the model, error, the message's pattern): arguments checked before any tensor op
ARGUMENT_CASES = [
    ("classes-as-a-string", lambda m: zero_shot_classifier(m, "cat"), TypeError,
     r"class_names must be a list of names such as \['cat'\], got the string 'cat', which would "
     r"make one class of each of its characters"),
    ("duplicate-class", lambda m: zero_shot_classifier(m, ["cat", "dog", "cat"]), ValueError,
     r"class_names has 'cat' twice \(at 0 and 2\).*Give each class once"),
    ("no-classes", lambda m: zero_shot_classifier(m, []), ValueError,
     "class_names is empty: give at least one class name"),
    ("class-not-a-string", lambda m: zero_shot_classifier(m, ["cat", 7]), TypeError,
     r"class_names\[1\] is int 7, not a string.*Give each class's name as a string"),
    ("blank-class", lambda m: zero_shot_classifier(m, ["cat", "  "]), ValueError,
     r"class_names\[1\] is '  ', an empty name.*Give each class a name"),
    ("classes-none", lambda m: zero_shot_classifier(m, None), TypeError,
     r"class_names must be a list of names, in the classes' order, such as \['cat', 'dog'\], "
     "got NoneType None"),
    ("classes-a-set", lambda m: zero_shot_classifier(m, {"cat"}), TypeError,
     r"in the classes' order.*got set \{'cat'\}"),
    ("not-a-two-tower-model", lambda m: zero_shot_classifier(m.image_model, ["cat"]), TypeError,
     r"takes a keras_vit.ImageTextModel \(CLIP, SigLIP\), got ViT. Read one with "
     r"ImageTextModel.from_checkpoint"),
    ("no-templates", lambda m: zero_shot_classifier(m, ["cat"], templates=[]), ValueError,
     "templates is empty: give at least one format string"),
    ("templates-a-number", lambda m: zero_shot_classifier(m, ["cat"], templates=5), TypeError,
     r"templates must be 'imagenet', 'simple' or a list of format strings.*got int 5"),
    ("template-with-two-slots", lambda m: prompt_templates(["a {} of a {}."]), ValueError,
     r"Each template must be a string with one '\{\}' for the class name.*got \['a \{\} of a \{\}.'\]"),
    ("unknown-template-set", lambda m: prompt_templates("openai"), ValueError,
     r"Unknown templates 'openai': use \['imagenet', 'simple'\]"),
    ("batch-size-zero", lambda m: class_embeddings(m, ["cat"], batch_size=0), ValueError,
     "batch_size must be an int >= 1, got 0"),
    ("classifier-name-a-number", lambda m: zero_shot_classifier(m, ["cat"], name=3), TypeError,
     "name must be a string or None, got int 3"),
    ("tokenize-none", lambda m: m.tokenize(None), TypeError,
     r"texts must be a string or a list of strings such as \['a photo of a cat'\], got NoneType None"),
    ("tokenize-empty-list", lambda m: m.tokenize([]), ValueError,
     "texts is an empty list: there is nothing to tokenize. Pass at least one string"),
    ("tokenize-a-number", lambda m: m.tokenize(["a cat", 3]), TypeError,
     r"texts\[1\] is int 3, not a string. Give every text as a string"),
    ("tokenize-bytes", lambda m: m.tokenize(b"a cat"), TypeError,
     "texts must be a string or a list of strings.*got bytes b'a cat'"),
    ("eos-outside-the-vocabulary", lambda m: TextTransformer(**{**TEXT_TOWER, "eos_token_id": 28},
                                                              vocab_size=28), ValueError,
     r"`eos_token_id` must be a token id, an int from 0 to vocab_size - 1 = 27, got 28"),
    ("causal-a-string", lambda m: TextTransformer(28, **{**TEXT_TOWER, "causal": "yes"}), ValueError,
     "TextTransformer's `causal` must be True or False, got 'yes'"),
    ("epsilon-zero", lambda m: TextTransformer(28, **TEXT_TOWER, layer_norm_epsilon=0), ValueError,
     "TextTransformer's `layer_norm_epsilon` must be a number > 0, got 0"),
    ("image-tower-none", lambda m: ImageTextModel(None, m.text_model), TypeError,
     r"image_model must be a keras_vit.ViT without a head \(num_classes=0\), got NoneType"),
    ("text-tower-a-vit", lambda m: ImageTextModel(m.image_model, m.image_model), TypeError,
     "text_model must be a keras_vit.TextTransformer, got ViT"),
    ("logit-scale-nan", lambda m: ImageTextModel(m.image_model, m.text_model, logit_scale=np.nan),
     ValueError, r"logit_scale \(the log of the logits' scale\) must be a finite number, got nan"),
    ("logit-bias-a-string", lambda m: ImageTextModel(m.image_model, m.text_model, logit_bias="-10"),
     ValueError, r"logit_bias must be a finite number or None \(no bias, CLIP\), got '-10'"),
    ("tokenizer-of-another-length",
     lambda m: ImageTextModel(m.image_model, m.text_model, tokenizer=caption_tokenizer(12)),
     ValueError, "The tokenizer makes ids of length 12, and the text tower reads 8. Make the "
     "tokenizer with context_length=8"),
    ("tokenizer-a-dict", lambda m: ImageTextModel(m.image_model, m.text_model, tokenizer={}),
     TypeError, r"tokenizer must be a keras_vit.TextTokenizer or None, got dict.*from_directory"),
    ("no-tokenizer", lambda m: zero_shot_classifier(
        ImageTextModel(m.image_model, m.text_model), ["cat"]), ValueError,
     r"This model has no tokenizer.*context_length=8"),
    ("tokenizer-files-a-list", lambda m: TextTokenizer([("tokenizer.json", b"{}")], CONTEXT),
     TypeError, r"files must be a dict of file name -> bytes, got list.*from_directory"),
    ("tokenizer-file-as-text", lambda m: TextTokenizer({"tokenizer.json": "{}"}, CONTEXT), TypeError,
     r"files\['tokenizer.json'\] is str. Give `path.read_bytes\(\)`"),
    ("context-length-a-string", lambda m: TextTokenizer(m.tokenizer.files, "77"), ValueError,
     r"context_length must be an int >= 2 \(the text tower's positions: CLIP 77, SigLIP 64\), "
     "got '77'"),
    ("tokenizer-folder-none", lambda m: TextTokenizer.from_directory(None, CONTEXT), TypeError,
     "TextTokenizer.from_directory takes a folder's path, got NoneType None"),
]


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", ARGUMENT_CASES, ids=[case[0] for case in ARGUMENT_CASES])
def test_a_wrong_argument_is_named_with_what_to_pass(model, case):
    _, call, error, pattern = case
    with pytest.raises(error, match=pattern):
        call(model)


# (id, call on the model, error, the message's pattern): checks of the model's computations
COMPUTATION_CASES = [
    ("id-past-the-vocabulary", lambda m: m.encode_text(with_id(IDS, 0, 3, 28)), ValueError,
     r"token_ids\[0, 3\] is 28, outside the text tower's vocabulary: ids go from 0 to 27 "
     r"\(vocab_size 28\), and 1 of the 16 are outside it. Make them with the tower's own tokenizer"),
    ("negative-id-tensor", lambda m: m.encode_text(keras.ops.convert_to_tensor(with_id(IDS, 1, 0, -1))),
     ValueError, r"token_ids\[1, 0\] is -1, outside the text tower's vocabulary"),
    ("float-ids", lambda m: m.encode_text(IDS.astype("float32")), ValueError,
     r"token_ids must be integer ids, got float32 values \(shape \(2, 8\)\). Make them with "
     r"`model.tokenize\(texts\)`"),
    ("texts-as-ids", lambda m: m.encode_text(["a photo of a cat"]), TypeError,
     r"token_ids must be token ids, not texts; got \['a photo of a cat'\]. Tokenize the texts "
     r"first: `model.encode_text\(model.tokenize\(texts\)\)`"),
    ("ids-none", lambda m: m.encode_text(None), TypeError,
     r"token_ids must be an array of int ids \(texts, 8\), got NoneType None"),
    ("ids-of-another-length", lambda m: m.encode_text(IDS[:, :5]), ValueError,
     r"token_ids must be \(texts, 8\), got \(2, 5\). Make them with `model.tokenize\(texts\)`"),
    ("similarity-past-the-vocabulary", lambda m: m.similarity(IMAGES, IDS + 20), ValueError,
     r"token_ids\[0, 1\] is 43, outside the text tower's vocabulary"),
    ("called-with-float-ids", lambda m: m({"images": IMAGES, "token_ids": IDS.astype("float32")}),
     ValueError, "token_ids must be integer ids, got float32 values"),
    ("logits-of-images", lambda m: m.logits(IMAGES, m.encode_text(IDS)), ValueError,
     r"image_embeds must be embeddings of shape \(batch, 8\), got shape \(3, 16, 16, 3\). Make "
     r"them with model.encode_images\(images\)"),
    ("logits-of-class-weights-untransposed",
     lambda m: m.logits(m.encode_images(IMAGES), class_embeddings(m, ["seven", "two", "one"],
                                                                  templates=["the digit {}."])),
     ValueError, r"text_embeds must be embeddings of shape \(batch, 8\), got shape \(8, 3\)"),
    ("logits-of-a-list", lambda m: m.logits([0.0] * 8, m.encode_text(IDS)), TypeError,
     r"image_embeds must be an array of embeddings \(batch, 8\), got list"),
    ("images-of-another-size", lambda m: m.encode_images(np.zeros((1, 32, 32, 3), "float32")),
     ValueError, r"was built for 16x16 images, got 32x32"),
    ("images-none", lambda m: m.encode_images(None), TypeError,
     r"takes a batch of images, an array of shape \(batch, 16, 16, 3\), got None. Read image "
     r"files with `keras_vit.data.read_images`"),
]


@pytest.mark.parametrize("case", COMPUTATION_CASES, ids=[case[0] for case in COMPUTATION_CASES])
def test_wrong_inputs_to_the_model_are_named_with_what_to_pass(model, case):
    _, call, error, pattern = case
    with pytest.raises(error, match=pattern):
        call(model)


def test_checked_inputs_still_run_as_before(model):
    # the ids' values are read where they are known, and traced ids pass to the tower
    expected = keras.ops.convert_to_numpy(model.encode_text(IDS))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(
        model.encode_text(keras.ops.convert_to_tensor(IDS))), expected, atol=1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.encode_text(IDS.tolist())),
                               expected, atol=1e-6)
    symbolic = model.encode_text(keras.Input((CONTEXT,), dtype="int32"))
    assert tuple(symbolic.shape) == (None, 8)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        traced = tf.function(model.encode_text)(tf.constant(IDS))
    elif keras.backend.backend() == "jax":
        import jax

        traced = jax.jit(model.encode_text)(IDS)
    else:
        return  # PyTorch runs eagerly: its ids are always known
    np.testing.assert_allclose(keras.ops.convert_to_numpy(traced), expected, atol=1e-5)


# -- tokenizer files ----------------------------------------------------------

def tokenizer_folders(root):
    """A folder of each tokenizer kind under `root`: ``tokenizer.json``
    (the captions' word-level tokenizer), ``bpe`` (CLIP's vocab.json and
    merges.txt) and ``sentencepiece`` (SigLIP's spiece.model), the last two
    as test_image_text builds them with transformers."""
    from test_image_text import clip_tokenizer
    from test_image_text import siglip_tokenizer

    folders = {kind: root / kind for kind in ("tokenizer.json", "bpe", "sentencepiece")}
    folders["tokenizer.json"].mkdir(parents=True)
    caption_tokenizer(CONTEXT).save(folders["tokenizer.json"])
    clip_tokenizer(folders["bpe"])
    (folders["bpe"] / "tokenizer.json").unlink()  # OpenAI's files: vocab.json and merges.txt alone
    siglip_tokenizer(folders["sentencepiece"])
    return folders


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    return tokenizer_folders(tmp_path_factory.mktemp("tokenizers"))


def json_without(*keys):
    """A change of a JSON file (bytes to bytes) that deletes the entry at
    `keys` (``"config", "image_shape"``: the image shape in its config)."""
    def change(data):
        content = json.loads(data)
        parent = content
        for key in keys[:-1]:
            parent = parent[key]
        del parent[keys[-1]]
        return json.dumps(content).encode()
    return change


# (id, folder kind, file, its new bytes or a function of the old, the message's pattern)
FILE_CASES = [
    ("tokenizer-json-not-json", "tokenizer.json", "tokenizer.json", b"{1: 2}",
     r"tokenizer.json is not a tokenizer that the `tokenizers` library reads \(key must be a "
     r"string at line 1 column 2\); the file may be cut short or edited. Save the tokenizer "
     r"again beside the weights \(`processor.save_pretrained\(folder\)`\)"),
    ("tokenizer-json-cut-short", "tokenizer.json", "tokenizer.json", lambda data: data[:len(data) // 2],
     r"tokenizer.json is not a tokenizer that the `tokenizers` library reads \(EOF while parsing"),
    ("tokenizer-config-cut-short", "tokenizer.json", "tokenizer_config.json", b'{"pad_token": ',
     r"tokenizer_config.json is not valid JSON \(Expecting value: line 1 column 15 \(char 14\)\); "
     r"it should hold the tokenizer's settings. Save the tokenizer again"),
    ("tokenizer-config-a-list", "tokenizer.json", "tokenizer_config.json", b'["<|pad|>"]',
     r"tokenizer_config.json holds a JSON list, not an object; it should hold the tokenizer's "
     "settings. Save the tokenizer again"),
    ("vocab-not-json", "bpe", "vocab.json", b'{"a": 0,',
     r"vocab.json is not valid JSON \(.*\); it should hold CLIP's BPE vocabulary, token -> id. "
     "Save the tokenizer again"),
    ("vocab-id-a-string", "bpe", "vocab.json", b'{"a": "zero"}',
     r"vocab.json maps tokens to ids, and gives 'a' the id 'zero', not an int >= 0. Save the "
     "tokenizer again"),
    ("vocab-without-end-of-text", "bpe", "vocab.json", json_without("<|endoftext|>"),
     r"vocab.json has no '<\|endoftext\|>', the eos_token. Set eos_token in "
     "tokenizer_config.json to one of its tokens. Save the tokenizer again"),
    ("merges-line-not-a-pair", "bpe", "merges.txt", lambda data: data + b"\na b c",
     r"merges.txt line \d+ is 'a b c', not a pair of tokens such as 'a b'; the file may be cut "
     "short or edited. Save the tokenizer again"),
    ("merges-not-text", "bpe", "merges.txt", b"\xff\xfe\x00",
     r"merges.txt is not UTF-8 text \('utf-8' codec can't decode byte 0xff.*\). Save the "
     "tokenizer again"),
    ("merges-of-another-vocabulary", "bpe", "merges.txt", lambda data: data + "\nq¶ ¶q".encode(),
     r"vocab.json and merges.txt do not make one BPE \(Error while initializing BPE: Token `.*` "
     "out of vocabulary\): they may come from different tokenizers. Save the tokenizer again"),
    ("spiece-cut-short", "sentencepiece", "spiece.model", lambda data: data[:len(data) // 3],
     "spiece.model is not a SentencePiece model: sentencepiece cannot parse it, and the file may "
     "be cut short or damaged. Save the tokenizer again"),
    ("spiece-without-the-eos-piece", "sentencepiece", "tokenizer_config.json",
     b'{"eos_token": "<eos>"}',
     r"spiece.model has no piece '<eos>', the eos_token. Set eos_token in tokenizer_config.json "
     "to one of its pieces. Save the tokenizer again"),
]


def copy_with(folder, destination, name, change):
    """`folder` copied to `destination`, its file `name` replaced by
    `change` (bytes, or a function of the old bytes; None: removed)."""
    shutil.copytree(folder, destination)
    path = destination / name
    if change is None:
        path.unlink()
    else:
        path.write_bytes(change(path.read_bytes()) if callable(change) else change)
    return destination


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", FILE_CASES, ids=[case[0] for case in FILE_CASES])
def test_a_tokenizer_file_that_cannot_be_read_is_named(tokenizer_files, tmp_path, case):
    _, kind, name, change, pattern = case
    folder = copy_with(tokenizer_files[kind], tmp_path / kind, name, change)
    with pytest.raises(ValueError, match=pattern) as raised:
        TextTokenizer.from_directory(folder, CONTEXT)
    assert str(raised.value).startswith(f"{folder}: ")  # the folder, then the file


@pytest.mark.backend_independent
def test_a_tokenizer_folder_that_is_not_one_is_named(tokenizer_files, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no such folder. Give the folder that holds the "
                                                r"tokenizer files \(tokenizer.json, vocab.json"):
        TextTokenizer.from_directory(tmp_path / "missing", CONTEXT)
    with pytest.raises(ValueError, match=r"is a file; TextTokenizer.from_directory reads a folder. "
                                         "Give the folder that holds it"):
        TextTokenizer.from_directory(tokenizer_files["bpe"] / "vocab.json", CONTEXT)


@pytest.mark.backend_independent
def test_a_two_tower_folder_with_a_damaged_tokenizer_is_named(tmp_path_factory, tmp_path):
    from test_image_text import towers

    _, folder, *_ = towers("clip", tmp_path_factory)
    folder = copy_with(folder, tmp_path / "clip", "tokenizer.json", b"{1: 2}")
    with pytest.raises(ValueError, match=re.escape(f"{folder}: tokenizer.json is not a tokenizer "
                                                   "that the `tokenizers` library reads (key must")
                       + r" be a string.*\(ImageTextModel reads the tokenizer with the weights.\)"):
        ImageTextModel.from_checkpoint(folder)


# -- keras-hub presets --------------------------------------------------------

@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    """A keras-hub ViT backbone preset and a classifier preset, as
    test_keras_hub saves them."""
    from test_keras_hub import hub_preset

    root = tmp_path_factory.mktemp("presets")
    hub_preset(root / "backbone", {}, None)
    hub_preset(root / "classifier", {}, dict(num_classes=5))
    return root


# (id, preset, file, its new bytes, a function of the old, or None (removed), reader, pattern)
PRESET_CASES = [
    ("weights-cut-short", "backbone", "model.weights.h5", lambda data: data[:len(data) // 2],
     ViT.from_checkpoint,
     r"keras-hub preset .*backbone: model.weights.h5 is not a readable HDF5 weights file \(Unable "
     r"to synchronously open file \(truncated file.*\)\); it may be cut short or damaged. Copy or "
     "download the whole preset folder again, or save it again with keras-hub's `save_to_preset`"),
    ("weights-not-hdf5", "backbone", "model.weights.h5", b"not an HDF5 file", ViT.from_checkpoint,
     r"model.weights.h5 is not a readable HDF5 weights file \(.*file signature not found.*\)"),
    ("weights-missing", "backbone", "model.weights.h5", None, ViT.from_checkpoint,
     r"keras-hub preset .*backbone: no model.weights.h5 in the folder, which holds the weights. "
     "Copy or download the whole preset folder again"),
    ("config-cut-short", "backbone", "config.json", lambda data: data[:len(data) // 2],
     ViT.from_checkpoint,
     r"config.json is not valid JSON \(.*\). The file may be truncated or edited by hand: "
     "download or save it again"),
    ("config-missing", "backbone", "config.json", None, read_keras_hub,
     r"keras-hub preset .*backbone: no config.json in the folder, which describes the backbone. "
     "Copy or download the whole preset folder again"),
    ("config-without-class-name", "backbone", "config.json", json_without("class_name"),
     read_keras_hub, r"config.json lacks 'class_name', which the model needs\. .*save or download it again"),
    ("config-without-image-shape", "backbone", "config.json",
     json_without("config", "image_shape"), ViT.from_checkpoint,
     r"config.json's \"config\" lacks 'image_shape', which the model needs"),
    ("task-weights-missing", "classifier", "task.weights.h5", None, ViT.from_checkpoint,
     r"keras-hub preset .*classifier: no task.weights.h5 in the folder, which holds the weights"),
    ("task-cut-short", "classifier", "task.json", lambda data: data[:len(data) // 2],
     ViT.from_checkpoint, r"task.json is not valid JSON \(.*\). The file may be truncated"),
    ("task-without-classes", "classifier", "task.json", json_without("config", "num_classes"),
     ViT.from_checkpoint, r"task.json's \"config\" lacks 'num_classes', which the model needs"),
]


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", PRESET_CASES, ids=[case[0] for case in PRESET_CASES])
def test_a_preset_file_that_cannot_be_read_is_named(presets, tmp_path, case):
    _, preset, name, change, reader, pattern = case
    folder = copy_with(presets / preset, tmp_path / preset, name, change)
    with pytest.raises(CheckpointError, match=pattern):
        reader(folder)


@pytest.mark.backend_independent
def test_a_preset_folder_that_is_not_there_is_named(tmp_path):
    with pytest.raises(CheckpointError, match=r"keras-hub preset .*missing: no such folder. A "
                                              r"keras-hub preset is a folder \(config.json"):
        read_keras_hub(tmp_path / "missing")
