"""CLIP and SigLIP whole: `keras_vit.ImageTextModel` against transformers'
``CLIPModel`` and ``SiglipModel`` (small random models, saved with
tokenizers built here: a byte-level BPE vocabulary and a small SentencePiece
model), on every backend: token ids equal, embeddings and
``logits_per_image`` within 1e-5, a ``.keras`` round trip with the same
numbers; the zero-shot classifier; the contrastive losses against NumPy;
locked-image tuning."""

import io
import json

import keras
import numpy as np
import pytest
from helpers import LazyModule
from helpers import to_numpy

from keras_vit import ImageTextModel
from keras_vit import TextTokenizer
from keras_vit import TextTransformer
from keras_vit import ViT
from keras_vit import zero_shot_classifier
from keras_vit.training import CLIPLoss
from keras_vit.training import SigLIPLoss
from keras_vit.weights import CheckpointError

torch = LazyModule("torch", reason="transformers' models run on PyTorch")
transformers = LazyModule("transformers", reason="the reference CLIP and SigLIP")

CONTEXT = 16  # the text towers' positions
CORPUS = ["a photo of a cat", "a photo of a dog", "a photo of the digit three", "itap of a plane",
          "a bad photo of the small bird", "art of the ship", "it's a origami truck!",
          "zero one two three four five six seven eight nine"] * 10
TEXTS = ["A photo of a CAT.", "  the   digit, three!  ", "xyz unknown ünïcode 123",
         "a photo of a dog " * 10, ""]
TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)


def clip_tokenizer(folder):
    """A byte-level BPE trained on `CORPUS` with CLIP's pipeline, saved by
    transformers' ``CLIPTokenizer`` (tokenizer.json) with vocab.json and
    merges.txt beside it, as CLIP's folders have them."""
    from tokenizers import Regex
    from tokenizers import Tokenizer
    from tokenizers import models
    from tokenizers import normalizers
    from tokenizers import pre_tokenizers
    from tokenizers import trainers

    from keras_vit.text_tokenizer import _CLIP_SPLIT

    bpe = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="</w>"))
    bpe.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    bpe.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|startoftext|>", "<|endoftext|>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), end_of_word_suffix="</w>"))
    model = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) for m in model["merges"]]
    tokenizer = transformers.CLIPTokenizer(vocab=model["vocab"], merges=merges,
                                           model_max_length=CONTEXT)
    tokenizer.save_pretrained(folder)
    (folder / "vocab.json").write_text(json.dumps(model["vocab"]))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges))
    return tokenizer


def siglip_tokenizer(folder):
    """A 60-piece SentencePiece model trained on `CORPUS` (``</s>`` = 1 ends
    and pads), saved by transformers' ``SiglipTokenizer``."""
    sentencepiece = pytest.importorskip("sentencepiece")
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS), model_writer=proto, vocab_size=60, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, hard_vocab_limit=False, minloglevel=2)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "source.model").write_bytes(proto.getvalue())
    tokenizer = transformers.SiglipTokenizer(str(folder / "source.model"), model_max_length=CONTEXT)
    tokenizer.save_pretrained(folder)
    (folder / "source.model").unlink()
    return tokenizer


def siglip2_tokenizer(folder):
    """A byte-fallback BPE trained on `CORPUS` as Gemma's, saved by
    transformers' ``Siglip2Tokenizer`` (tokenizer.json; lowercase, left padding)."""
    from tokenizers import Tokenizer
    from tokenizers import models
    from tokenizers import normalizers
    from tokenizers import pre_tokenizers
    from tokenizers import trainers

    bpe = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    bpe.normalizer = normalizers.Replace(" ", "\u2581")
    bpe.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous")
    special = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"] + [f"<0x{i:02X}>" for i in range(256)]
    bpe.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=special,
                                                        show_progress=False))
    model = json.loads(bpe.to_str())["model"]
    tokenizer = transformers.Siglip2Tokenizer(vocab=model["vocab"],
                                              merges=[tuple(m) for m in model["merges"]])
    tokenizer.save_pretrained(folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


def make_two_towers(kind, folder):
    """A random `kind` (``"clip"``, ``"siglip"``) two-tower model with its
    tokenizer, saved in `folder`; what transformers computes on `TEXTS` and
    two images."""
    t = transformers
    tokenizer = (clip_tokenizer if kind == "clip" else siglip_tokenizer)(folder)
    text = dict(TOWER, vocab_size=len(tokenizer), max_position_embeddings=CONTEXT)
    vision = dict(TOWER, image_size=32, patch_size=8)
    if kind == "clip":
        text.update(eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                    pad_token_id=tokenizer.pad_token_id)
        config = t.CLIPConfig(text_config=text, vision_config=vision, projection_dim=12)
        model_class = t.CLIPModel
    else:
        config = t.SiglipConfig(text_config=text, vision_config=vision)
        model_class = t.SiglipModel
    torch.manual_seed(0)
    source = model_class(config)
    with torch.no_grad():  # every weight random, LayerNorms too; the logit scale and bias as made
        for name, parameter in source.named_parameters():
            if not name.startswith("logit_"):
                parameter.normal_(0.0, 0.2)
        if kind == "siglip":
            source.logit_bias.fill_(-1.5)
    source.eval().save_pretrained(folder)
    ids = tokenizer(TEXTS, padding="max_length", max_length=CONTEXT, truncation=True)["input_ids"]
    images = np.random.default_rng(0).normal(size=(2, 32, 32, 3)).astype("float32")
    with torch.no_grad():
        out = source(input_ids=torch.tensor(ids), pixel_values=torch.from_numpy(
            images.transpose(0, 3, 1, 2)))
    expected = {name: getattr(out, name).numpy()
                for name in ("image_embeds", "text_embeds", "logits_per_image")}
    return folder, np.asarray(ids), images, expected


_MADE = {}


def towers(kind, tmp_path_factory):
    """`make_two_towers`' folder and numbers, made once per module."""
    if kind not in _MADE:
        _MADE[kind] = (kind, *make_two_towers(kind, tmp_path_factory.mktemp(kind)))
    return _MADE[kind]


@pytest.fixture(scope="module", params=["clip", "siglip"])
def two_towers(request, tmp_path_factory):
    return towers(request.param, tmp_path_factory)


@pytest.mark.slow_cases("clip")
def test_two_tower_files_give_transformers_numbers(two_towers, tmp_path):
    kind, folder, ids, images, expected = two_towers
    model = ImageTextModel.from_checkpoint(folder)
    assert model.logit_bias is None if kind == "clip" else model.logit_bias is not None
    np.testing.assert_array_equal(model.tokenize(TEXTS), ids)
    numbers = {"image_embeds": model.encode_images(images), "text_embeds": model.encode_text(ids),
               "logits_per_image": model.similarity(images, ids)}
    for name, value in numbers.items():
        np.testing.assert_allclose(to_numpy(value), expected[name], rtol=0, atol=1e-5, err_msg=name)
    # called as Keras calls it (fit, predict): the batch's logits
    np.testing.assert_allclose(to_numpy(model({"images": images, "token_ids": ids})),
                               expected["logits_per_image"], rtol=0, atol=1e-5)
    # a .keras round trip: the same numbers, the tokenizer's files among the assets
    model.save(tmp_path / "model.keras")
    back = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(back, ImageTextModel) and back.tokenizer.kind == model.tokenizer.kind
    np.testing.assert_array_equal(back.tokenize(TEXTS), ids)
    np.testing.assert_allclose(to_numpy(back.similarity(images, ids)),
                               expected["logits_per_image"], rtol=0, atol=1e-5)


@pytest.mark.backend_independent
def test_tokenizers_give_the_source_processors_ids(tmp_path):
    # CLIP from tokenizer.json, and from vocab.json and merges.txt alone (OpenAI's files)
    reference = clip_tokenizer(tmp_path / "clip")
    expected = reference(TEXTS, padding="max_length", max_length=CONTEXT, truncation=True)["input_ids"]
    tokenizer = TextTokenizer.from_directory(tmp_path / "clip", CONTEXT)
    assert tokenizer.kind == "tokenizer.json"
    np.testing.assert_array_equal(tokenizer(TEXTS), expected)
    (tmp_path / "clip" / "tokenizer.json").unlink()
    tokenizer = TextTokenizer.from_directory(tmp_path / "clip", CONTEXT)
    assert tokenizer.kind == "bpe" and tokenizer(TEXTS).dtype == np.int32
    np.testing.assert_array_equal(tokenizer(TEXTS), expected)
    assert expected[3][-1] == reference.eos_token_id  # cut to the context, the end-of-text kept
    # SigLIP's SentencePiece: canonicalised (lowercase, no punctuation), </s>, padded with </s>
    reference = siglip_tokenizer(tmp_path / "siglip")
    tokenizer = TextTokenizer.from_directory(tmp_path / "siglip", CONTEXT)
    assert tokenizer.kind == "sentencepiece"
    np.testing.assert_array_equal(tokenizer(TEXTS), reference(
        TEXTS, padding="max_length", max_length=CONTEXT, truncation=True)["input_ids"])
    np.testing.assert_array_equal(tokenizer("a photo of a cat"), tokenizer(["A photo of a cat!"]))
    # SigLIP 2's files: a tokenizer.json (Gemma's byte-fallback BPE) that transformers'
    # Siglip2Tokenizer lowercases and pads on the left
    reference = siglip2_tokenizer(tmp_path / "siglip2")
    tokenizer = TextTokenizer.from_directory(tmp_path / "siglip2", CONTEXT)
    expected = reference(TEXTS, padding="max_length", max_length=CONTEXT, truncation=True)["input_ids"]
    np.testing.assert_array_equal(tokenizer(TEXTS), expected)
    assert expected[-1] == [reference.pad_token_id] * CONTEXT and expected[1][0] == reference.pad_token_id
    with pytest.raises(ValueError, match="No tokenizer among the files .*spiece.model"):
        TextTokenizer.from_directory(tmp_path, CONTEXT)


@pytest.mark.backend_independent
def test_released_names_read_both_towers_from_the_hugging_face_cache(tmp_path_factory, tmp_path,
                                                                      monkeypatch):
    """`ImageTextModel.from_checkpoint("clip_b32.hf_openai_224")` takes the
    released name's repository from a Hugging Face cache laid out here
    (offline), with the tokenizer files the download keeps: CLIP's
    vocab.json and merges.txt, SigLIP's spiece.model."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    from test_download import write_hf_cache

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for kind, name, repo in (("clip", "clip_b32.hf_openai_224", "openai/clip-vit-base-patch32"),
                             ("siglip", "siglip_b16.hf_webli_224", "google/siglip-base-patch16-224")):
        _, folder, ids, images, expected = towers(kind, tmp_path_factory)
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "tokenizer.json"}
        write_hf_cache(tmp_path / "hub", repo, files, "0123456789abcdef0123456789abcdef01234567")
        model = ImageTextModel.from_checkpoint(name)
        np.testing.assert_array_equal(model.tokenize(TEXTS), ids)
        np.testing.assert_allclose(to_numpy(model.similarity(images, ids)),
                                   expected["logits_per_image"], rtol=0, atol=1e-5)


@pytest.mark.backend_independent
def test_a_one_tower_folder_is_refused_naming_its_tower(tmp_path):
    config = transformers.CLIPVisionConfig(**TOWER, image_size=32, patch_size=8)
    transformers.CLIPVisionModel(config).save_pretrained(tmp_path / "vision")
    with pytest.raises(CheckpointError, match=r"holds CLIP's image tower alone \(CLIPVisionModel\); "
                                              r"an ImageTextModel needs both towers.*ViT.from_checkpoint"):
        ImageTextModel.from_checkpoint(tmp_path / "vision")
    image_only = ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8,
                     mlp_dim=16, num_classes=3)
    path = image_only.save_checkpoint(tmp_path / "vit.npz")
    with pytest.raises(CheckpointError, match=r"is a \.npz file, which holds an image tower at "
                                              r"most; ImageTextModel reads a Hugging Face CLIPModel"):
        ImageTextModel.from_checkpoint(path)
    tokens = ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8, mlp_dim=16,
                 num_classes=0, pooling="none")
    with pytest.raises(ValueError, match=r"gives the token sequence \(pooling='none'\)"):
        ImageTextModel(tokens, None)
    with pytest.raises(ValueError, match="must be a keras_vit.ViT without a head"):
        ImageTextModel(ViT(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=8,
                           mlp_dim=16, num_classes=3), None)


LABELS = ["cat", "dog", "bird"]
PROMPTS = ["a photo of a {}.", "art of the {}."]


@pytest.mark.slow_cases("siglip")
def test_zero_shot_classifier_is_a_vit_with_the_prompts_top_1(two_towers):
    kind, folder, ids, images, expected = two_towers
    model = ImageTextModel.from_checkpoint(folder)
    classifier = zero_shot_classifier(model, LABELS, templates=PROMPTS)
    assert isinstance(classifier, ViT) and classifier.class_names == LABELS
    # SigLIP's classes each on their own (a sigmoid), CLIP's a softmax over them
    assert classifier.config.head_activation == ("sigmoid" if kind == "siglip" else "softmax")
    # the prompts' similarity, averaged by hand: each class's prompts embedded, averaged, normalised
    texts = model.encode_text(model.tokenize([p.format(c) for c in LABELS for p in PROMPTS]))
    mean = to_numpy(texts).reshape(len(LABELS), len(PROMPTS), -1).mean(1)
    mean /= np.linalg.norm(mean, axis=-1, keepdims=True)
    wanted = to_numpy(model.logits(model.encode_images(images), mean))
    logits = to_numpy(classifier.predict(images, verbose=0))
    np.testing.assert_allclose(logits, wanted, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(logits.argmax(-1), wanted.argmax(-1))
    with pytest.raises(ValueError, match="one '{}' for the class name"):
        zero_shot_classifier(model, LABELS, templates=["a photo"])
    with pytest.raises(ValueError, match=r"Unknown templates 'openai'.*\['imagenet', 'simple'\]"):
        zero_shot_classifier(model, LABELS, templates="openai")


@pytest.mark.slow
def test_zero_shot_classifier_exports_and_predicts_from_the_command_line(tmp_path_factory, tmp_path,
                                                                         capsys):
    from test_keras_features import run_exported

    from keras_vit.cli import main

    kind, folder, ids, images, expected = towers("clip", tmp_path_factory)
    model = ImageTextModel.from_checkpoint(folder)
    classifier = zero_shot_classifier(model, LABELS, templates="simple")
    logits = to_numpy(classifier.predict(images, verbose=0))
    classifier.export(str(tmp_path / "zero_shot.onnx"), format="onnx", verbose=False)
    np.testing.assert_allclose(run_exported("onnx", str(tmp_path / "zero_shot.onnx"), images),
                               logits, rtol=1e-4, atol=1e-4)
    # keras-vit zero-shot: the same classifier on image files, CLIP's softmax over the labels
    import tensorflow as tf

    paths = []
    for i, image in enumerate(np.random.default_rng(3).integers(0, 256, (2, 32, 32, 3), np.uint8)):
        paths.append(str(tmp_path / f"{i}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(image))
    assert main(["zero-shot", str(folder), *paths, "--labels", ",".join(LABELS),
                 "--templates", "simple", "--top-k", "2"]) == 0
    from keras_vit.data import read_images

    want = to_numpy(classifier.predict(read_images(paths, model=classifier), verbose=0))
    probabilities = np.exp(want - want.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    lines = capsys.readouterr().out.strip().splitlines()
    for path, line, row in zip(paths, lines, probabilities):
        top = np.argsort(row)[::-1][:2]
        assert line == f"{path}: " + ", ".join(f"{LABELS[i]} ({row[i]:.1%})" for i in top)
    with pytest.raises(SystemExit):
        main(["zero-shot", str(folder), *paths, "--labels", " , "])
    assert "--labels is empty" in capsys.readouterr().err
    # the zero_shot benchmark on an image folder: its class names, the same classifier's top-1
    from keras_vit.evaluation import evaluate_protocols

    names, labelled = sorted(LABELS), []
    for i, image in enumerate(np.random.default_rng(4).integers(0, 256, (6, 32, 32, 3), np.uint8)):
        (tmp_path / "folder" / names[i % 3]).mkdir(parents=True, exist_ok=True)
        labelled.append((str(tmp_path / "folder" / names[i % 3] / f"{i}.png"), i % 3))
        tf.io.write_file(labelled[-1][0], tf.io.encode_png(image))
    by_name = zero_shot_classifier(model, names, templates="simple")
    logits = to_numpy(by_name.predict(read_images([p for p, _ in labelled], model=by_name), verbose=0))
    # the two-tower folder by its path: both towers, and k-NN on the image embeddings
    scores = evaluate_protocols(str(folder), "zero_shot,knn", tmp_path / "eval",
                                 dataset=str(tmp_path / "folder"), train_split="train", split="train",
                                 templates="simple", k=2, verbose=0)["benchmarks"]
    assert scores["zero_shot"]["top1"] == pytest.approx(
        100 * np.mean(logits.argmax(-1) == [y for _, y in labelled]))
    assert scores["knn"]["k"] == 2 and 0 <= scores["knn"]["top1"] <= 100
    with pytest.raises(ValueError, match="needs an image-text model"):
        evaluate_protocols(by_name, "zero_shot", tmp_path / "vit", dataset="digits", verbose=0)
    with pytest.raises(ValueError, match=r"runs a ViT \(ImageTextModel given\)\. An image-text model runs"):
        evaluate_protocols(model, "imagenet", tmp_path / "two", verbose=0)


def numpy_losses(matching, logits):
    """CLIP's and SigLIP's losses written out in NumPy (float64)."""
    def log_softmax(x, axis):
        x = x - x.max(axis, keepdims=True)
        return x - np.log(np.exp(x).sum(axis, keepdims=True))
    rows = -(matching / matching.sum(1, keepdims=True) * log_softmax(logits, 1)).sum(1)
    cols = -(matching / matching.sum(0, keepdims=True) * log_softmax(logits, 0)).sum(0)
    z = 2 * matching - 1
    sigmoid = np.log1p(np.exp(-z * logits)).sum(1)  # -log_sigmoid(z * logits), summed over texts
    return ((rows + cols) / 2).mean(), sigmoid.mean()


def test_contrastive_losses_equal_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 5, (6, 6)).astype("float32")
    for matching in (np.eye(6, dtype="float32"),  # paired batches; and two captions of one image
                     np.eye(6, dtype="float32") + np.eye(6, k=1, dtype="float32") * (np.arange(6) == 2)):
        clip, siglip = numpy_losses(matching.astype(np.float64), logits.astype(np.float64))
        np.testing.assert_allclose(float(CLIPLoss()(matching, logits)), clip, rtol=1e-5)
        np.testing.assert_allclose(float(SigLIPLoss()(matching, logits)), siglip, rtol=1e-5)
    assert tuple(CLIPLoss(reduction=None)(np.eye(6), logits).shape) == (6,)
    with pytest.raises(ValueError, match="a matching matrix of the same shape"):
        SigLIPLoss()(np.eye(4), logits)


def tiny_two_towers(logit_bias=-10.0):
    """A tiny SigLIP-like pair of towers (16-D embeddings), built here."""
    image = ViT(image_size=16, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                num_classes=0, pooling="gap")
    text = TextTransformer(vocab_size=20, context_length=8, hidden_dim=16, num_layers=1,
                           num_heads=2, mlp_dim=32, projection_dim=16, causal=False, pooling="last")
    return ImageTextModel(image, text, logit_scale=np.log(10.0), logit_bias=logit_bias)


@pytest.mark.slow
def test_locked_image_tuning_changes_only_the_text_tower():
    model = tiny_two_towers()
    model.lock_image_tower()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=SigLIPLoss())
    rng = np.random.default_rng(0)
    batch = {"images": rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32"),
             "token_ids": rng.integers(0, 20, (4, 8)).astype("int32")}
    before = {id(v): to_numpy(v).copy() for v in model.weights}
    model.fit(batch, batch_size=4, epochs=1, verbose=0)  # no labels: image i goes with text i
    changed = {id(v) for v in model.weights if not np.array_equal(to_numpy(v), before[id(v)])}
    image, text = ({id(v) for v in tower.weights} for tower in (model.image_model, model.text_model))
    assert image and not changed & image
    assert text <= changed  # every text weight took the step, and the logit scale and bias
    assert {id(model.logit_scale), id(model.logit_bias)} <= changed


@pytest.mark.slow
def test_the_zero_shot_recipe_learns_the_captioned_digits(tmp_path, capsys):
    """recipes/zero_shot.py, four epochs of two-tower training: the held-out
    digits' zero-shot accuracy goes up from chance, and the saved models
    reload with the same numbers (the recipe prints the difference)."""
    import pathlib
    import runpy

    recipe = runpy.run_path(str(pathlib.Path(__file__).parents[1] / "recipes" / "zero_shot.py"))
    results = recipe["run"](tmp_path, epochs=4, lit_epochs=0, verbose=0)
    before, after = results["clip"]
    assert before < 0.2 and after > 0.5, results
    out = capsys.readouterr().out
    assert "max |logit difference| 0.0e+00" in out
    classifier = keras.saving.load_model(tmp_path / "digits_zero_shot.keras")
    assert isinstance(classifier, ViT) and classifier.class_names[7] == "seven"
