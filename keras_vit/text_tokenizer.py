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
"""

import json
import pathlib
import re
import string

import numpy as np

KINDS = ("tokenizer.json", "bpe", "sentencepiece")
_FILES = {"tokenizer.json": ("tokenizer.json",), "bpe": ("vocab.json", "merges.txt"),
          "sentencepiece": ("spiece.model",)}
_CONFIG = "tokenizer_config.json"
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

    Call: a string or a list of strings -> int32 ``(texts, context_length)``.

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
        self.files = {str(name): bytes(data) for name, data in dict(files).items()}
        self.context_length = int(context_length)
        if self.context_length < 2:
            raise ValueError(f"context_length must be at least 2, got {context_length!r}.")
        self.kind = next((kind for kind in KINDS if all(f in self.files for f in _FILES[kind])), None)
        if self.kind is None:
            raise ValueError(
                f"No tokenizer among the files {sorted(self.files)}: keras_vit reads "
                "tokenizer.json, vocab.json with merges.txt (CLIP), or spiece.model (SigLIP). "
                "Save the source's tokenizer beside its weights (`processor.save_pretrained`).")
        self.settings = json.loads(self.files[_CONFIG]) if _CONFIG in self.files else {}
        self._encode, self.vocab_size = getattr(self, "_make_" + self.kind.replace(".", "_"))()

    @classmethod
    def from_directory(cls, directory, context_length):
        """The tokenizer of the files in `directory` (a Hugging Face folder)."""
        directory = pathlib.Path(directory)
        names = [n for kind in KINDS for n in _FILES[kind]] + [_CONFIG, "special_tokens_map.json"]
        files = {name: (directory / name).read_bytes() for name in names
                 if (directory / name).is_file()}
        try:
            return cls(files, context_length)
        except ValueError as error:
            raise ValueError(f"{directory}: {error}") from None

    def __call__(self, texts):
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("TextTokenizer takes a string or a list of strings, got "
                             f"{[type(t).__name__ for t in texts][:4]}.")
        if not texts:
            return np.zeros((0, self.context_length), np.int32)
        return np.asarray(self._encode(texts), np.int32).reshape(len(texts), self.context_length)

    def _special(self, name, default):
        token = self.settings.get(name)
        if token is None and "special_tokens_map.json" in self.files:
            token = json.loads(self.files["special_tokens_map.json"]).get(name)
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
        from tokenizers import Tokenizer
        from tokenizers import normalizers

        tokenizer = Tokenizer.from_str(self.files["tokenizer.json"].decode("utf-8"))
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
        from tokenizers import Regex
        from tokenizers import Tokenizer
        from tokenizers import normalizers
        from tokenizers import pre_tokenizers
        from tokenizers import processors
        from tokenizers.models import BPE

        vocab = json.loads(self.files["vocab.json"])
        merges = [tuple(line.split()) for line in self.files["merges.txt"].decode("utf-8").splitlines()
                  if line.strip() and not line.startswith("#version")]
        bos = self._special("bos_token", "<|startoftext|>")
        eos = self._special("eos_token", "<|endoftext|>")
        unk = self._special("unk_token", "<|endoftext|>")
        tokenizer = Tokenizer(BPE(vocab=vocab, merges=merges, continuing_subword_prefix="",
                                  end_of_word_suffix="</w>", fuse_unk=False, unk_token=unk))
        tokenizer.normalizer = normalizers.Sequence(
            [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_CLIP_SPLIT), behavior="removed", invert=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False)])
        tokenizer.post_processor = processors.RobertaProcessing(
            (eos, vocab[eos]), (bos, vocab[bos]), trim_offsets=False, add_prefix_space=False)
        return self._fixed_length(tokenizer, self._special("pad_token", "<|endoftext|>"))

    def _make_sentencepiece(self):
        import sentencepiece

        model = sentencepiece.SentencePieceProcessor(model_proto=self.files["spiece.model"])
        eos = model.piece_to_id(self._special("eos_token", "</s>"))
        pad = model.piece_to_id(self._special("pad_token", "</s>"))
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
