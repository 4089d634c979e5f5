"""The tokenizers of CLIP's and SigLIP's text towers, from the files beside
their weights, through the well-kept libraries (``tokenizers``,
``sentencepiece``); neither needs TensorFlow.

`TextTokenizer` turns strings into the int32 token ids a
`keras_vit.TextTransformer` reads: ``(texts, context_length)``, cut and
padded as the source's processor does (``padding="max_length"``,
``truncation=True``, the end-of-text token kept). Its files travel in a
``.keras`` archive as assets (`keras_vit.ImageTextModel`).

- ``tokenizer.json``: the ``tokenizers`` pipeline as stored (CLIP's
  byte-level BPE, SigLIP 2's Gemma BPE), the lowercasing that transformers'
  ``Siglip2Tokenizer`` adds where ``tokenizer_config.json`` names that
  class, and its ``padding_side``.
- ``vocab.json`` and ``merges.txt``: CLIP's byte-level BPE, built as
  transformers' ``CLIPTokenizer`` builds it (NFC, whitespace collapsed,
  lowercase; CLIP's split pattern; ``</w>`` ends a word;
  ``<|startoftext|> ... <|endoftext|>``, padded with ``<|endoftext|>``).
- ``spiece.model``: SigLIP's SentencePiece model, after SigLIP's
  canonicalisation (big_vision's: lowercase, punctuation removed,
  whitespace collapsed), the text then ``</s>``, padded with ``</s>``
  (transformers' ``SiglipTokenizer``).

A file that cannot be read (cut short, edited, of another format) raises a
`ValueError` naming it, what is wrong in it and what to do.
"""

import os
import pathlib
import re
import string
from collections.abc import Mapping

import numpy as np

from keras_vit.config import is_int
from keras_vit.extras import require
from keras_vit.io.files import read_json

TOKENIZER_KINDS = ("tokenizer.json", "bpe", "sentencepiece")
_FILES = {"tokenizer.json": ("tokenizer.json",), "bpe": ("vocab.json", "merges.txt"),
          "sentencepiece": ("spiece.model",)}
_CONFIG = "tokenizer_config.json"
_TOKENIZERS = "CLIP's and SigLIP's tokenizers (keras_vit.TextTokenizer)"
_SPECIAL_TOKENS = "special_tokens_map.json"
# What to do about a tokenizer file that cannot be read
_FIX = ("Save the tokenizer again beside the weights (`processor.save_pretrained(folder)`), or "
        "download its files again.")
# CLIP's pre-tokenizer split (transformers' CLIPTokenizer, after OpenAI's clip/simple_tokenizer.py)
_CLIP_SPLIT = (r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]"""
               r"""|[^\s\p{L}\p{N}]+""")


class TextTokenizer:
    """Strings to a text tower's token ids, as the source's processor makes them.

    Args:
        files: dict, file name -> bytes: ``tokenizer.json`` (and optionally
            ``tokenizer_config.json``), or ``vocab.json`` and
            ``merges.txt``, or ``spiece.model``.
        context_length: int. The ids' length: the text tower's positions
            (CLIP 77, SigLIP 64).

    Call: a string or a non-empty list of strings -> int32 ``(texts,
    context_length)``; anything else raises an error saying what to pass.

    Attributes: ``kind`` (``"tokenizer.json"``, ``"bpe"``,
    ``"sentencepiece"``), ``vocab_size`` (the ids are below it, added
    tokens included), ``context_length``, ``files``.

    Example:
        A folder's tokenizer files read back (here the word-level
        tokenizer of `keras_vit.data.captions`, saved; a CLIP or SigLIP
        folder is read the same way):

        ```python
        import os
        from keras_vit import TextTokenizer
        from keras_vit.data.captions import caption_tokenizer

        os.makedirs("captions", exist_ok=True)
        caption_tokenizer().save("captions")
        tokenizer = TextTokenizer.from_directory("captions", context_length=8)
        print(tokenizer.kind, tokenizer.vocab_size)              # -> tokenizer.json 28
        print(tokenizer(["The digit SEVEN.", "a small gray two"]))
        # -> [[ 1 23  7 20  4  2  0  0]
        # ->  [ 1  5 22 11 25  2  0  0]]
        ```
    """

    def __init__(self, files, context_length):
        if not isinstance(files, Mapping):
            raise TypeError(
                f"TextTokenizer's files must be a dict of file name -> bytes, got "
                f"{type(files).__name__}. Read a folder's files with "
                "TextTokenizer.from_directory(folder, context_length).")
        for name, data in files.items():
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError(
                    f"TextTokenizer's files hold each file's bytes; files[{name!r}] is "
                    f"{type(data).__name__}. Give `path.read_bytes()`, or read the folder with "
                    "TextTokenizer.from_directory(folder, context_length).")
        if not is_int(context_length, 2):
            raise ValueError(f"context_length must be an int >= 2 (the text tower's positions: "
                             f"CLIP 77, SigLIP 64), got {context_length!r}.")
        self.files = {str(name): bytes(data) for name, data in files.items()}
        self.context_length = int(context_length)
        self.kind = next((kind for kind in TOKENIZER_KINDS if all(f in self.files for f in _FILES[kind])), None)
        if self.kind is None:
            raise ValueError(
                f"No tokenizer among the files {sorted(self.files)}: keras_vit reads "
                "tokenizer.json, vocab.json with merges.txt (CLIP), or spiece.model (SigLIP). "
                "Save the source's tokenizer beside its weights (`processor.save_pretrained`).")
        self.settings = self._json(_CONFIG, "the tokenizer's settings") if _CONFIG in self.files else {}
        self._encode, self.vocab_size = getattr(self, "_make_" + self.kind.replace(".", "_"))()

    @classmethod
    def from_directory(cls, directory, context_length):
        """The tokenizer of the files in `directory` (a Hugging Face folder);
        a missing folder raises a `FileNotFoundError`, a folder without
        tokenizer files or with one that cannot be read a `ValueError`
        naming the folder and the file."""
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"TextTokenizer.from_directory takes a folder's path, got "
                            f"{type(directory).__name__} {directory!r}.")
        directory = pathlib.Path(directory)
        if not directory.exists():
            raise FileNotFoundError(f"{directory}: no such folder. Give the folder that holds the "
                                    "tokenizer files (tokenizer.json, vocab.json and merges.txt, "
                                    "or spiece.model).")
        if not directory.is_dir():
            raise ValueError(f"{directory} is a file; TextTokenizer.from_directory reads a folder. "
                             f"Give the folder that holds it, {directory.parent}.")
        names = [n for kind in TOKENIZER_KINDS for n in _FILES[kind]] + [_CONFIG, _SPECIAL_TOKENS]
        files = {name: (directory / name).read_bytes() for name in names
                 if (directory / name).is_file()}
        try:
            return cls(files, context_length)
        except ValueError as error:
            raise ValueError(f"{directory}: {error}") from None

    def __call__(self, texts):
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a string or a list of strings such as "
                            f"['a photo of a cat'], got {type(texts).__name__} {texts!r:.80}.")
        if not texts:
            raise ValueError(f"texts is an empty {type(texts).__name__}: there is nothing to "
                             "tokenize. Pass at least one string.")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__} {text!r:.80}, not a string. "
                                "Give every text as a string.")
        return np.asarray(self._encode(texts), np.int32).reshape(len(texts), self.context_length)

    def _json(self, name, what):
        """The JSON object in the file `name`; one that is not raises a
        `ValueError` naming it (`keras_vit.io.files.read_json`)."""
        return read_json(name, what, content=self.files[name], fix=_FIX)

    def _special(self, name, default):
        token = self.settings.get(name)
        if token is None and _SPECIAL_TOKENS in self.files:
            token = self._json(_SPECIAL_TOKENS, "the special tokens").get(name)
        token = default if token is None else token
        if token is None:
            return None
        return token["content"] if isinstance(token, dict) else str(token)

    def _fixed_length(self, tokenizer, pad, side="right"):
        """`tokenizer` (a ``tokenizers.Tokenizer``) cut to the context length
        (its post-processor's special tokens kept) and padded to it with the
        token `pad`."""
        pad_id = tokenizer.token_to_id(pad) if pad is not None else None
        if pad_id is None:
            raise ValueError(f"the tokenizer has no padding token ({pad!r} is not in its "
                             "vocabulary); name one as pad_token in tokenizer_config.json.")
        tokenizer.enable_truncation(self.context_length)
        tokenizer.enable_padding(direction=side, pad_id=pad_id, pad_token=pad,
                                 length=self.context_length)

        def encode(texts):
            return [encoding.ids for encoding in tokenizer.encode_batch(texts)]
        return encode, tokenizer.get_vocab_size(with_added_tokens=True)

    def _make_tokenizer_json(self):
        require("tokenizers", _TOKENIZERS)
        from tokenizers import Tokenizer
        from tokenizers import normalizers

        try:
            tokenizer = Tokenizer.from_str(self.files["tokenizer.json"].decode("utf-8"))
        except Exception as error:  # tokenizers raises a bare Exception; bytes: UnicodeDecodeError
            raise ValueError(f"tokenizer.json is not a tokenizer that the `tokenizers` library "
                             f"reads ({error}); the file may be cut short or edited. {_FIX}") from None
        cls = self.settings.get("tokenizer_class")
        if cls == "Siglip2Tokenizer":  # transformers adds SigLIP 2's lowercasing to the file's
            steps = [normalizers.Lowercase()]
            if tokenizer.normalizer is not None:
                steps.append(tokenizer.normalizer)
            tokenizer.normalizer = normalizers.Sequence(steps)
        side = self.settings.get("padding_side", "left" if cls == "Siglip2Tokenizer" else "right")
        pad = self._special("pad_token", tokenizer.padding and tokenizer.padding["pad_token"])
        return self._fixed_length(tokenizer, pad, side)

    def _make_bpe(self):
        require("tokenizers", _TOKENIZERS)
        from tokenizers import Regex
        from tokenizers import Tokenizer
        from tokenizers import normalizers
        from tokenizers import pre_tokenizers
        from tokenizers import processors
        from tokenizers.models import BPE

        vocab = self._json("vocab.json", "CLIP's BPE vocabulary, token -> id")
        token, id_ = next(((t, i) for t, i in vocab.items() if not is_int(i, 0)), (None, None))
        if token is not None:
            raise ValueError(f"vocab.json maps tokens to ids, and gives {token!r} the id {id_!r}, "
                             f"not an int >= 0. {_FIX}")
        try:
            lines = self.files["merges.txt"].decode("utf-8").splitlines()
        except UnicodeDecodeError as error:
            raise ValueError(f"merges.txt is not UTF-8 text ({error}). {_FIX}") from None
        merges = []
        for number, line in enumerate(lines, 1):
            if line.strip() and not line.startswith("#version"):
                pair = tuple(line.split())
                if len(pair) != 2:
                    raise ValueError(f"merges.txt line {number} is {line!r:.80}, not a pair of "
                                     f"tokens such as 'a b'; the file may be cut short or edited. "
                                     f"{_FIX}")
                merges.append(pair)
        bos = self._special("bos_token", "<|startoftext|>")
        eos = self._special("eos_token", "<|endoftext|>")
        unk = self._special("unk_token", "<|endoftext|>")
        for role, token in (("bos_token", bos), ("eos_token", eos)):
            if token not in vocab:
                raise ValueError(f"vocab.json has no {token!r}, the {role}. Set {role} in "
                                 f"tokenizer_config.json to one of its tokens. {_FIX}")
        try:
            model = BPE(vocab=vocab, merges=merges, continuing_subword_prefix="",
                        end_of_word_suffix="</w>", fuse_unk=False, unk_token=unk)
        except Exception as error:  # tokenizers raises a bare Exception
            raise ValueError(f"vocab.json and merges.txt do not make one BPE ({error}): they may "
                             f"come from different tokenizers. {_FIX}") from None
        tokenizer = Tokenizer(model)
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False)])
        tokenizer.post_processor = processors.RobertaProcessing(
            (eos, vocab[eos]), (bos, vocab[bos]), trim_offsets=False, add_prefix_space=False)
        return self._fixed_length(tokenizer, self._special("pad_token", "<|endoftext|>"))

    def _make_sentencepiece(self):
        sentencepiece = require("sentencepiece", "SigLIP's SentencePiece tokenizer (keras_vit.TextTokenizer)")

        try:
            model = sentencepiece.SentencePieceProcessor(model_proto=self.files["spiece.model"])
        except RuntimeError:  # sentencepiece's error for bytes that do not parse
            raise ValueError(f"spiece.model is not a SentencePiece model: sentencepiece cannot "
                             f"parse it, and the file may be cut short or damaged. {_FIX}") from None

        def piece_id(role):
            piece = self._special(role, "</s>")
            if model.piece_to_id(piece) == model.unk_id() and piece != model.id_to_piece(model.unk_id()):
                raise ValueError(f"spiece.model has no piece {piece!r}, the {role}. Set {role} "
                                 f"in tokenizer_config.json to one of its pieces. {_FIX}")
            return model.piece_to_id(piece)

        eos, pad = piece_id("eos_token"), piece_id("pad_token")
        lower = bool(self.settings.get("do_lower_case", True))
        punctuation = str.maketrans("", "", string.punctuation)

        def encode(texts):
            rows = []
            for text in texts:
                text = text.lower() if lower else text
                text = re.sub(r"\s+", " ", text.translate(punctuation)).strip()
                ids = model.encode(text)[:self.context_length - 1] + [eos]
                rows.append(ids + [pad] * (self.context_length - len(ids)))
            return rows
        return encode, model.get_piece_size()

    # -- in a .keras archive (`keras_vit.ImageTextModel`) ------------------------

    def save(self, directory):
        """Writes the tokenizer's files into `directory`."""
        for name, data in self.files.items():
            (pathlib.Path(directory) / name).write_bytes(data)
