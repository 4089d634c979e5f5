"""Checkpoints by URL: ``hf://``, ``https://``, ``gs://`` and other filesystems.

Every remote checkpoint becomes a local path that the format readers open, so a
URL and a local file go through the same code. ``hf://owner/repo`` goes
through ``huggingface_hub`` (its own cache, revisions, tokens and
``HF_HUB_OFFLINE``). Everything else is copied into keras_vit's cache
(:func:`cache_dir`), at a path made from the URL (:func:`cache_path`), so a
file downloaded by hand can be put there. A download is written to
``<file>.part`` and renamed only when it is complete and its size (and
SHA-256, where known) are right. An interrupted ``https://`` download resumes
from its ``.part`` file on the next call; a wrong file is deleted. Nothing
downloaded is ever executed or unpickled.
"""

import fnmatch
import hashlib
import os
import pathlib
import posixpath
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request

from keras_vit.extras import install_command
from keras_vit.extras import require
from keras_vit.io.files import CheckpointError
from keras_vit.startup import progress_verbose

CACHE_ENV = "KERAS_VIT_CACHE"
# What a checkpoint folder needs: the readers' files, never pickles or code.
# the weights and configs, and the tokenizers of two-tower folders (CLIP's
# merges.txt beside vocab.json, SigLIP's spiece.model; tokenizer.json is a .json)
CHECKPOINT_PATTERNS = ("*.json", "*.safetensors", "*.npz", "merges.txt", "spiece.model")
_CHUNK = 1 << 20
_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+)://(.+)$")


def is_url(location):
    """True for ``scheme://...`` (``hf``, ``https``, ``gs``, ``s3``, ...)."""
    return bool(_URL.match(str(location)))


def cache_dir():
    """keras_vit's download cache: ``$KERAS_VIT_CACHE``, else ``keras_vit/``
    in Keras's own cache directory (``$KERAS_HOME``, default ``~/.keras``)."""
    if os.environ.get(CACHE_ENV):
        return pathlib.Path(os.environ[CACHE_ENV]).expanduser()
    keras_home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return pathlib.Path(keras_home) / "keras_vit"


def cache_path(url):
    """Where the cache keeps ``url``: ``<cache>/<scheme>/<host>/<path>`` (a
    port joined to the host with ``_``), e.g.
    ``~/.keras/keras_vit/https/storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz``."""
    parts = urllib.parse.urlsplit(str(url))
    pieces = [p for p in parts.path.split("/") if p]
    if not parts.netloc or not pieces or any(p in (".", "..") for p in pieces):
        raise CheckpointError(f"{url} is not a URL of a file (scheme://host/path).")
    return cache_dir().joinpath(parts.scheme, parts.netloc.replace(":", "_"), *pieces)


def fetch(url, sha256=None, size=None, progress=True):
    """A local path holding the checkpoint at ``url``, downloaded if needed.

    Args:
        url: ``hf://owner/repo[@revision][/path]``, ``http(s)://...``, or a
            URL of any filesystem that ``fsspec`` (``gs://`` with ``gcsfs``,
            ``s3://``, ``memory://``, ...) or ``tf.io.gfile`` (``gs://``,
            ``ram://``) opens. A remote folder is copied with its
            ``*.json``, ``*.safetensors`` and ``*.npz`` files.
        sha256: the file's published SHA-256 (hex), checked before it is kept.
        size: the file's published size in bytes, checked likewise.
        progress: show a progress bar while downloading.

    Returns:
        A ``pathlib.Path`` to the file or folder.

    Raises:
        CheckpointError: the download failed, was cut off (run again to
            resume) or gave a wrong file (deleted); the message names the URL
            and the cache path to fill by hand.
    """
    url = str(url)
    match = _URL.match(url)
    if not match:
        raise CheckpointError(f"{url} is not a URL (scheme://...).")
    scheme = match.group(1).lower()
    if scheme == "hf":
        return _fetch_huggingface(match.group(2))
    target = cache_path(url)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if scheme in ("http", "https"):
        _download(url, target, sha256, size, progress)
    else:
        _copy_from_filesystem(url, target, sha256, size)
    return target


# -- Hugging Face Hub ----------------------------------------------------------


def parse_hf_url(rest):
    """``owner/repo[@revision][/path]`` -> (repo_id, revision, path)."""
    pieces = rest.strip("/").split("/")
    if len(pieces) < 2 or not all(pieces[:2]):
        raise CheckpointError(f"hf://{rest} does not name a repository: use hf://owner/repo[@revision][/path].")
    name, _, revision = pieces[1].partition("@")
    return f"{pieces[0]}/{name}", revision or None, "/".join(pieces[2:]) or None


def _fetch_huggingface(rest):
    repo_id, revision, path = parse_hf_url(rest)
    huggingface_hub = require("huggingface_hub", f"hf://{rest}")
    from huggingface_hub import errors
    try:
        if path and path.endswith((".npz", ".safetensors", ".json")):
            return pathlib.Path(huggingface_hub.hf_hub_download(repo_id, path, revision=revision))
        folder = f"{path}/" if path else ""
        snapshot = huggingface_hub.snapshot_download(
            repo_id, revision=revision, allow_patterns=[folder + p for p in CHECKPOINT_PATTERNS])
        return pathlib.Path(snapshot, path or "")
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled) as error:
        raise CheckpointError(
            f"hf://{rest} is not in the Hugging Face cache ({huggingface_hub.constants.HF_HUB_CACHE}) "
            "and the Hub cannot be reached (no network, or HF_HUB_OFFLINE=1). On a machine with "
            f"network run `hf download {repo_id}` and copy that cache here, or download the "
            "files by hand and pass their folder.") from error
    except errors.HfHubHTTPError as error:  # no such repo, revision or file; gated; auth
        raise CheckpointError(f"hf://{rest}: the Hugging Face Hub answered: {error}") from error


# -- http(s) ---------------------------------------------------------------------


def _download(url, target, sha256, size, progress):
    """Downloads ``url`` into ``target`` through ``target.part``, resuming it."""
    part = target.with_name(target.name + ".part")
    start = part.stat().st_size if part.exists() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "keras-vit"})
    if start:
        request.add_header("Range", f"bytes={start}-")
    try:
        response = urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as error:
        if error.code == 416 and start:  # the part file is not a prefix: start over
            part.unlink()
            return _download(url, target, sha256, size, progress)
        raise CheckpointError(f"Downloading {url} failed: HTTP {error.code} {error.reason}.") from error
    except (urllib.error.URLError, OSError) as error:
        raise _unreachable(url, target, error) from error
    with response:
        if start and response.status != 206:  # the server ignored the range
            start = 0
        total = _total_size(response, start)
        bar = _progress_bar(total, start) if progress else None
        done = start
        try:
            with open(part, "ab" if start else "wb") as file:
                while chunk := response.read(_CHUNK):
                    file.write(chunk)
                    done += len(chunk)
                    if bar:
                        bar.update(done)
                file.flush()
                os.fsync(file.fileno())
        except OSError as error:  # a reset connection or a timeout
            raise _cut_off(url, part, done, total, error) from error
    if total is not None and done < total:
        raise _cut_off(url, part, done, total, "the connection closed")
    _check_and_keep(url, part, target, sha256, size if size is not None else total)


def _total_size(response, start):
    """The whole file's size from Content-Range or Content-Length, if sent."""
    content_range = response.headers.get("Content-Range", "")
    if "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return start + int(length) if length and length.isdigit() else None


def _progress_bar(total, start):
    import keras

    bar = keras.utils.Progbar(total, verbose=progress_verbose(), unit_name="B")
    bar.update(start)
    return bar


def _unreachable(url, target, error):
    return CheckpointError(
        f"Could not download {url} ({getattr(error, 'reason', error)}). Without network, "
        f"download it elsewhere and put it at {target} (the cache is ${CACHE_ENV} or "
        "~/.keras/keras_vit); then run again.")


def _cut_off(url, part, done, total, why):
    of = f" of {total}" if total is not None else ""
    return CheckpointError(
        f"The download of {url} stopped after {done}{of} bytes ({why}). The part is kept in "
        f"{part}: run again to resume it.")


# -- other filesystems (gs://, s3://, ram://, memory://, ...) --------------------


class _Fsspec:
    """The few file operations the copy needs, through an fsspec filesystem."""

    def __init__(self, fs):
        self.fs = fs

    def exists(self, url):
        return self.fs.exists(url)

    def isdir(self, url):
        return self.fs.isdir(url)

    def names(self, url):
        return [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(url, detail=False)]

    def open(self, url):
        return self.fs.open(url, "rb")


class _Gfile:
    """The same operations through ``tf.io.gfile``."""

    def __init__(self, gfile):
        self.gfile = gfile

    def exists(self, url):
        return self.gfile.exists(url)

    def isdir(self, url):
        return self.gfile.isdir(url)

    def names(self, url):
        return [name.rstrip("/") for name in self.gfile.listdir(url)]

    def open(self, url):
        return self.gfile.GFile(url, "rb")


def _filesystem(url):
    """fsspec when it has a driver for the scheme, else ``tf.io.gfile``."""
    try:
        import fsspec

        return _Fsspec(fsspec.core.url_to_fs(url)[0])
    except (ImportError, ValueError):  # no fsspec, or no driver (gcsfs, s3fs) for the scheme
        pass
    try:
        from tensorflow.io import gfile
    except ImportError:
        raise CheckpointError(
            f"Nothing here can read {url}: install fsspec with the scheme's driver (for gs://, "
            f"{install_command('gcs')}; s3fs for s3://), or TensorFlow for tf.io.gfile.") from None
    return _Gfile(gfile)


def _copy_from_filesystem(url, target, sha256, size):
    """Copies a remote file, or a folder's checkpoint files, into the cache."""
    files = _filesystem(url)
    part = target.with_name(target.name + ".part")
    try:
        if not files.exists(url):
            raise CheckpointError(f"No file or folder at {url}.")
        if not files.isdir(url):
            _copy(files, url, part)
            _check_and_keep(url, part, target, sha256, size)
            return
        names = [n for n in files.names(url) if any(fnmatch.fnmatch(n, p) for p in CHECKPOINT_PATTERNS)]
        if not names:
            raise CheckpointError(f"{url} is a folder without checkpoint files {CHECKPOINT_PATTERNS}.")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir()
        for name in names:
            _copy(files, f"{url.rstrip('/')}/{name}", part / name)
        os.replace(part, target)
    except CheckpointError:
        raise
    except Exception as error:  # each filesystem raises its own errors
        if part.is_dir():
            shutil.rmtree(part)
        else:
            part.unlink(missing_ok=True)
        raise _unreachable(url, target, error) from error


def _copy(files, url, destination):
    with files.open(url) as source, open(destination, "wb") as file:
        shutil.copyfileobj(source, file, _CHUNK)
        file.flush()
        os.fsync(file.fileno())


# -- keeping a finished download ----------------------------------------------------


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_and_keep(url, part, target, sha256, size):
    """Renames ``part`` to ``target`` if its size and hash are right, else
    deletes it."""
    got = part.stat().st_size
    problem = None
    if size is not None and got != size:
        problem = f"{got} bytes where {size} were expected"
    elif sha256 and (digest := _sha256(part)) != sha256.lower():
        problem = f"SHA-256 {digest}, not the published {sha256}"
    if problem:
        part.unlink()
        raise CheckpointError(
            f"The file downloaded from {url} is wrong ({problem}); it was deleted, not cached. "
            "Run again; if this repeats, the source has changed.")
    os.replace(part, target)
