r"""CIFAR10 and MNIST: verified download and offline loading (augmentation: :mod:`itlin_core.pipeline`).

The image chapters (Goldwaser and Ge, Figs. 2-6, 8, 10, 11, and Fig. 1 of their workshop
paper) train on CIFAR10 and MNIST. This module fetches the canonical archives once into a cache folder and loads them as
NumPy arrays::

    d = itlin_core.data.cifar10()      # x_train (50000, 32, 32, 3) uint8, y_train (50000,) int32, ...
    d = itlin_core.data.mnist()        # x_train (60000, 28, 28, 1) uint8, ...

**Where the files live.** ``data_dir`` if given, else ``$ITLIN_DATA_DIR``, else
``~/.cache/itlin_core``. CIFAR10: the archive ``cifar-10-python.tar.gz`` and its extracted
folder ``cifar-10-batches-py/`` (``data_batch_1`` ... ``data_batch_5``, ``test_batch``).
MNIST: the four idx files ``train-images-idx3-ubyte.gz``, ``train-labels-idx1-ubyte.gz``,
``t10k-images-idx3-ubyte.gz``, ``t10k-labels-idx1-ubyte.gz`` in ``mnist/``.

**Integrity.** A download goes to ``<name>.part``, is hashed while it streams, and is renamed
to its final name (an atomic ``os.replace``) only when its MD5 equals the canonical one
(:data:`CHECKSUMS`, the values torchvision and the datasets' own pages publish); a mismatch
deletes the ``.part`` file and tries the next mirror (``itlin_core._download``), as does a
mirror that takes longer than ``itlin_core._download.DOWNLOAD_TIMEOUT`` seconds to connect or
to send its next block. A ``.part`` file left by an
interrupted run is never read: it is deleted before a new download. With ``verify=True``
(default) files already on disk are checked against the same checksums (CIFAR10's extracted
batches have their own canonical MD5s) and a mismatch raises :class:`ChecksumError` without
deleting anything the user put there. With ``verify=False`` any folder in the canonical
layout is loaded without checksums, whatever the number of images per batch or of
``data_batch_*`` files (for subsets and the stand-in data of :func:`write_stand_in`);
missing files are still downloaded and verified. Offline with nothing on disk,
:class:`DatasetUnavailableError` says which file to put where.

The CIFAR10 batches are Python pickles; they are read with an unpickler that only rebuilds
NumPy arrays and plain containers, so a foreign file given with ``verify=False`` cannot run
code. The idx files are parsed from their header (magic number, element type, dimensions)
and checked against their length.
"""

from __future__ import annotations

import gzip
import os
import pickle
import re
import struct
import zlib
from pathlib import Path

import numpy as np

from ._download import (ChecksumError, DatasetError, DatasetUnavailableError, data_root, default_data_dir,
                        ensure, extract_folder)
from ._download import check_file as _check_checksum
from ._io import ArrayUnpickler, write_bytes_atomically
from ._validate import positive_ints

__all__ = ["cifar10", "mnist", "default_data_dir", "DatasetError", "DatasetUnavailableError",
           "ChecksumError", "CHECKSUMS", "CIFAR10_URLS", "MNIST_MIRRORS", "read_idx",
           "write_stand_in", "IMAGE_SHAPES", "TRAIN_SIZES"]

#: The shape of one image (height, width, channels) of each data set.
IMAGE_SHAPES = {"cifar10": (32, 32, 3), "mnist": (28, 28, 1)}
#: The number of training images of each data set.
TRAIN_SIZES = {"cifar10": 50_000, "mnist": 60_000}

CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_FOLDER = "cifar-10-batches-py"
CIFAR10_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST = "test_batch"
#: Where the CIFAR10 python archive is downloaded from (Krizhevsky's page), in order.
CIFAR10_URLS = ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",)

MNIST_FOLDER = "mnist"
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
               "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
#: MNIST mirrors tried in order (LeCun's original site now often refuses downloads; the
#: first is the one torchvision uses, the second TensorFlow's).
MNIST_MIRRORS = ("https://ossci-datasets.s3.amazonaws.com/mnist/",
                 "https://storage.googleapis.com/cvdf-datasets/mnist/",
                 "http://yann.lecun.com/exdb/mnist/")

#: Canonical checksums, ``file name -> (algorithm, hex digest)``; the algorithm is any name
#: ``hashlib.new`` accepts. CIFAR10's archive and batches as published on its page and used by
#: torchvision; MNIST's four gz files as used by torchvision and TensorFlow.
CHECKSUMS: dict[str, tuple[str, str]] = {
    CIFAR10_ARCHIVE: ("md5", "c58f30108f718f92721af3b95e74349a"),
    "data_batch_1": ("md5", "c99cafc152244af753f735de768cd75f"),
    "data_batch_2": ("md5", "d4bba439e000b95fd0a9bffe97cbabec"),
    "data_batch_3": ("md5", "54ebc095f3ab1f0389bbae665268c751"),
    "data_batch_4": ("md5", "634d18415352ddfa80567beed471001a"),
    "data_batch_5": ("md5", "482c414d41f54cd18b22e5b47cb7c3cb"),
    "test_batch": ("md5", "40351d587109b95175f43aff81a1287e"),
    "train-images-idx3-ubyte.gz": ("md5", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
    "train-labels-idx1-ubyte.gz": ("md5", "d53e105ee54ea40749a09fcbcd1e9432"),
    "t10k-images-idx3-ubyte.gz": ("md5", "9fb629c4189551a2d022fa330f9573f3"),
    "t10k-labels-idx1-ubyte.gz": ("md5", "ec29112dd5afa0611ce80d1b7f02629c"),
}

# --------------------------------------------------------------------------- CIFAR10

def _read_cifar_batch(path: Path):
    """``(images (N, 32, 32, 3) uint8, labels (N,) int32)`` from one pickled batch: a dict
    with ``b'data'`` (N, 3072) uint8, each row the 1024 red, then green, then blue values of a
    32x32 image in row-major order, and ``b'labels'``, N integers in 0..9."""
    with open(path, "rb") as f:
        try:
            batch = ArrayUnpickler(f, encoding="bytes").load()
        except Exception as e:
            raise ValueError(f"{path} is not a CIFAR10 batch (a pickled dict): {e}") from None
    if not isinstance(batch, dict):
        raise ValueError(f"{path} is not a CIFAR10 batch: it holds a {type(batch).__name__}, not a dict.")
    get = lambda key: batch.get(key.encode(), batch.get(key))
    data, labels = get("data"), get("labels")
    if data is None or labels is None:
        raise ValueError(f"{path} is not a CIFAR10 batch: it needs keys b'data' and b'labels', "
                         f"has {sorted(map(repr, batch))}.")
    data, labels = np.asarray(data), np.asarray(labels)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: b'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}.")
    if labels.shape != (data.shape[0],) or not np.issubdtype(labels.dtype, np.integer) or (
            labels.size and (labels.min() < 0 or labels.max() > 9)):
        raise ValueError(f"{path}: b'labels' must hold {data.shape[0]} integers in 0..9, "
                         f"got {labels.dtype} {labels.shape}.")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels.astype(np.int32)


def _cifar_folder(root: Path) -> Path:
    """``root/cifar-10-batches-py``, or ``root`` itself when it holds the batches directly."""
    nested = root / CIFAR10_FOLDER
    if not nested.is_dir() and ((root / "data_batch_1").exists() or (root / CIFAR10_TEST).exists()):
        return root
    return nested


def _extract_cifar(archive: Path, root: Path) -> Path:
    """Extract the batch files of ``archive`` into ``root/cifar-10-batches-py``."""
    return extract_folder(archive, root, CIFAR10_FOLDER)


def _cifar_where_to_put(root: Path) -> str:
    folder = _cifar_folder(root)
    partial = (f"({folder} holds a partial or stand-in set: pass verify=False to load it as it is.) "
               if (folder / CIFAR10_TEST).exists() else "")
    return partial + (f"To load CIFAR10 without internet, download {CIFAR10_URLS[0]} elsewhere and put it at "
            f"{root / CIFAR10_ARCHIVE}, or put its extracted folder at {root / CIFAR10_FOLDER} "
            f"({', '.join(CIFAR10_TRAIN)}, {CIFAR10_TEST}); or pass data_dir= (or set ITLIN_DATA_DIR) "
            f"to a folder that holds them.")


def cifar10(data_dir=None, verify: bool = True, *, progress: str | None = None) -> dict:
    """CIFAR10 (Krizhevsky 2009): 50000 training and 10000 test 32x32 colour images, 10 classes.

    Args:
      data_dir: folder holding (or to receive) ``cifar-10-python.tar.gz`` and/or
        ``cifar-10-batches-py/``; default :func:`default_data_dir`.
      verify: check every file against its canonical MD5 (:data:`CHECKSUMS`); ``False`` loads
        any folder in the canonical layout (``data_batch_<i>`` for any number of ``i``, and
        ``test_batch``, with any number of images each), e.g. a subset or stand-in data.
      progress: download progress bar, ``"auto"``/``"text"``/``"off"`` (default
        ``$ITLIN_PROGRESS``).

    Returns:
      dict with ``x_train`` (N, 32, 32, 3) uint8 (NHWC), ``y_train`` (N,) int32, ``x_test``,
      ``y_test``, as NumPy arrays (``jnp.asarray`` puts them on the accelerator).

    Raises:
      DatasetUnavailableError: not on disk and the download failed (e.g. offline).
      ChecksumError: ``verify=True`` and a file on disk differs from the canonical one.
      ValueError: a file is not in the CIFAR10 batch format.
    """
    root = data_root(data_dir)
    folder = _cifar_folder(root)
    if verify:
        train_names = CIFAR10_TRAIN
        names = (*CIFAR10_TRAIN, CIFAR10_TEST)
        if not all((folder / n).exists() for n in names):  # never extracted, or interrupted
            archive = ensure(root / CIFAR10_ARCHIVE, CIFAR10_URLS, CHECKSUMS[CIFAR10_ARCHIVE], True, progress,
                             _cifar_where_to_put(root))
            folder = _extract_cifar(archive, root)
        for n in names:
            _check_checksum(folder / n, CHECKSUMS[n], n)
    else:
        if not (folder / CIFAR10_TEST).exists():
            archive = ensure(root / CIFAR10_ARCHIVE, CIFAR10_URLS, CHECKSUMS[CIFAR10_ARCHIVE], False, progress,
                             _cifar_where_to_put(root))
            folder = _extract_cifar(archive, root)
        numbered = [(int(m.group(1)), p.name) for p in folder.iterdir()
                    if (m := re.fullmatch(r"data_batch_(\d+)", p.name))]
        train_names = [name for _, name in sorted(numbered)]
        if not train_names:
            raise DatasetUnavailableError(
                f"{folder} has a {CIFAR10_TEST} but no data_batch_<i> files. " + _cifar_where_to_put(root))
    train = [_damaged_file(_read_cifar_batch, folder / n) for n in train_names]
    x_test, y_test = _damaged_file(_read_cifar_batch, folder / CIFAR10_TEST)
    return {"x_train": np.concatenate([x for x, _ in train]), "y_train": np.concatenate([y for _, y in train]),
            "x_test": x_test, "y_test": y_test}


# --------------------------------------------------------------------------- MNIST (idx files)

def _damaged_file(read, path: Path):
    """``read(path)``, its ValueError (a damaged or foreign file) ending in what to do next."""
    try:
        return read(path)
    except ValueError as e:
        raise ValueError(f"{str(e).rstrip('.')}. Delete {path.name} and load again (a missing file is downloaded "
                         "and checked), or replace it with an intact copy.") from None


_IDX_TYPES = {0x08: np.dtype(np.uint8), 0x09: np.dtype(np.int8), 0x0B: np.dtype(">i2"),
              0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(source) -> np.ndarray:
    """Parse an idx file (LeCun's format for MNIST), gzip-compressed or not.

    The header is two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), the number of dimensions ``d``, then ``d`` big-endian uint32
    sizes; the data follow in row-major order, big-endian. MNIST images are magic number
    2051 = ``0x00000803`` (uint8, 3-D), labels 2049 = ``0x00000801`` (uint8, 1-D).

    Args:
      source: a path or the file's bytes.

    Raises:
      ValueError: the header is not an idx header or the data length does not match it.
    """
    raw = Path(source).read_bytes() if isinstance(source, (str, os.PathLike)) else bytes(source)
    name = str(source) if isinstance(source, (str, os.PathLike)) else "idx data"
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"{name} is a damaged gzip file ({e}).") from None
    if len(raw) < 4 or raw[:2] != b"\x00\x00" or raw[2] not in _IDX_TYPES or raw[3] == 0:
        raise ValueError(f"{name} is not an idx file: its magic number is {raw[:4].hex() or 'missing'} "
                         f"(expected 0000TTDD with a type code TT in "
                         f"{sorted(f'{t:02x}' for t in _IDX_TYPES)} and DD >= 1 dimensions).")
    dtype, ndim = _IDX_TYPES[raw[2]], raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{name}: the idx header announces {ndim} dimensions but the file ends first.")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ValueError(f"{name}: the idx header says shape {shape} of {dtype} ({expected} bytes of data) "
                         f"but the file has {len(raw) - header}; it is truncated or corrupt.")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _mnist_folder(root: Path) -> Path:
    nested = root / MNIST_FOLDER
    if not nested.is_dir() and any((root / (n + s)).exists() for n in MNIST_FILES for s in (".gz", "")):
        return root
    return nested


def _mnist_where_to_put(folder: Path) -> str:
    return (f"To load MNIST without internet, download the four files "
            f"{', '.join(n + '.gz' for n in MNIST_FILES)} (e.g. from {MNIST_MIRRORS[0]}) elsewhere and "
            f"put them in {folder}; or pass data_dir= (or set ITLIN_DATA_DIR) to a folder that holds them.")


def mnist(data_dir=None, verify: bool = True, *, progress: str | None = None) -> dict:
    """MNIST (LeCun et al. 1998): 60000 training and 10000 test 28x28 grey digits, 10 classes.

    Args:
      data_dir: folder holding (or to receive) the four idx files in ``mnist/`` (or directly);
        default :func:`default_data_dir`.
      verify: check the four ``.gz`` files against their canonical MD5s; ``False`` loads the idx
        files of any size, gzip-compressed or not (``train-images-idx3-ubyte`` or ``...gz``).
      progress: download progress bar, ``"auto"``/``"text"``/``"off"`` (default
        ``$ITLIN_PROGRESS``).

    Returns:
      dict with ``x_train`` (N, 28, 28, 1) uint8 (NHWC), ``y_train`` (N,) int32, ``x_test``,
      ``y_test``, as NumPy arrays.

    Raises:
      DatasetUnavailableError, ChecksumError, ValueError: as :func:`cifar10` (ValueError also
      for a malformed idx file or image and label counts that differ).
    """
    root = data_root(data_dir)
    folder = _mnist_folder(root)
    arrays = {}
    for name in MNIST_FILES:
        gz, plain = folder / (name + ".gz"), folder / name
        if not verify and not gz.exists() and plain.exists():
            path = plain
        else:
            hint = _mnist_where_to_put(folder)
            if verify and not gz.exists() and plain.exists():
                hint += f" (An uncompressed {plain.name} is there, but it has no canonical checksum: pass verify=False to use it.)"
            path = ensure(gz, [m + gz.name for m in MNIST_MIRRORS], CHECKSUMS[gz.name], verify, progress, hint)
        arrays[name] = _damaged_file(read_idx, path)
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images, labels = arrays[f"{prefix}-images-idx3-ubyte"], arrays[f"{prefix}-labels-idx1-ubyte"]
        if images.dtype != np.uint8 or images.ndim != 3:
            raise ValueError(f"MNIST {split} images must be a 3-D uint8 idx array (N, H, W), got {images.dtype} {images.shape}.")
        if labels.dtype != np.uint8 or labels.shape != images.shape[:1] or (labels.size and labels.max() > 9):
            raise ValueError(f"MNIST {split} labels must be {images.shape[0]} uint8 values in 0..9 (one per image), "
                             f"got {labels.dtype} {labels.shape}.")
        out[f"x_{split}"] = np.ascontiguousarray(images[..., None])
        out[f"y_{split}"] = labels.astype(np.int32)
    return out


# --------------------------------------------------------------------------- stand-in data

def write_stand_in(name: str, data_dir, n_train: int = 500, n_test: int = 100, *, seed: int = 0,
                   batches: int = 5, overwrite: bool = False) -> Path:
    """Write stand-in data in the exact on-disk format of CIFAR10 or MNIST, for smoke runs.

    ``name`` is ``"cifar10"`` or ``"mnist"``. Each class ``c`` has a fixed random template and
    an image is its class template plus uniform noise, so a CNN can learn it in a few steps.
    CIFAR10: ``batches`` pickled training batches and a test batch in
    ``data_dir/cifar-10-batches-py``; MNIST: the four gzipped idx files in ``data_dir/mnist``.
    Load them with ``cifar10(data_dir, verify=False)`` / ``mnist(data_dir, verify=False)``.
    These are not CIFAR10 or MNIST: never report results on them as such.

    Refused with a ValueError before anything is written: ``n_train``, ``n_test`` or ``batches``
    that are not positive whole numbers, ``batches > n_train``, a ``data_dir`` that is a file;
    and, unless ``overwrite=True``, a ``data_dir`` that already holds files the stand-in would
    replace or hide (the real data set, say): CIFAR10's archive, batches in the folder or directly
    in ``data_dir``; MNIST's idx files, compressed or not, in ``mnist/`` or directly in ``data_dir``.
    With ``overwrite=True``, CIFAR10 batches beyond ``batches`` in the folder are deleted (the
    loader would mix them in). Each file is written atomically and read back before it replaces
    anything (:func:`itlin_core._io.atomic_write`).
    """
    if name not in ("cifar10", "mnist"):
        raise ValueError(f"name must be 'cifar10' or 'mnist', got {name!r}.")
    n_train, n_test, batches = positive_ints(n_train=n_train, n_test=n_test, batches=batches)
    if batches > n_train:
        raise ValueError(f"batches must be at most n_train ({n_train}; each batch holds an image), got {batches}.")
    root = Path(data_dir)
    above = next((p for p in (root, *root.parents) if p.exists()), root)
    if not above.is_dir():
        raise ValueError(f"data_dir must be a folder, but {above} is a file.")
    if name == "cifar10":
        folder = root / CIFAR10_FOLDER
        mine = [folder / f"data_batch_{i + 1}" for i in range(batches)] + [folder / CIFAR10_TEST]
        extra = [p for p in folder.glob("data_batch_*") if p not in mine]       # the loader would mix them in
        others = [*extra, root / CIFAR10_ARCHIVE, *root.glob("data_batch_*"), root / CIFAR10_TEST]
    else:
        folder = root / MNIST_FOLDER
        mine, extra = [folder / f"{n}.gz" for n in MNIST_FILES], []
        others = [d / (n + s) for d in (root, folder) for n in MNIST_FILES for s in ("", ".gz")]
    there = sorted(p for p in {*mine, *others} if p.exists())
    if there and not overwrite:
        shown = ", ".join(str(p.relative_to(root)) for p in there[:6]) + (" ..." if len(there) > 6 else "")
        raise ValueError(f"data_dir: {root} already holds {shown}; write_stand_in never replaces or hides files "
                         "(they may be the real data set, which the loader would no longer read). Choose an empty "
                         "folder, or pass overwrite=True.")
    for p in extra:
        p.unlink()
    rng = np.random.default_rng(seed)
    shape = IMAGE_SHAPES[name]
    templates = rng.uniform(0, 255, (10, *shape))

    def sample(n):
        y = rng.integers(0, 10, n)
        x = 0.6 * templates[y] + 0.4 * rng.uniform(0, 255, (n, *shape))
        return np.clip(np.round(x), 0, 255).astype(np.uint8), y

    folder.mkdir(parents=True, exist_ok=True)
    if name == "cifar10":
        splits = [(f"data_batch_{i + 1}", s) for i, s in enumerate(np.array_split(np.arange(n_train), batches))]
        for fname, idx in [*splits, (CIFAR10_TEST, np.arange(n_test))]:
            x, y = sample(len(idx))
            batch = {b"batch_label": b"stand-in " + fname.encode(), b"labels": [int(v) for v in y],
                     b"data": x.transpose(0, 3, 1, 2).reshape(len(idx), -1),
                     b"filenames": [f"{i}.png".encode() for i in range(len(idx))]}
            blob = pickle.dumps(batch, protocol=2)
            write_bytes_atomically(folder / fname, blob)
        return folder
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x, y = sample(n)
        for kind, arr in (("images-idx3", x[..., 0]), ("labels-idx1", y.astype(np.uint8))):
            header = struct.pack(f">HBB{arr.ndim}I", 0, 0x08, arr.ndim, *arr.shape)
            blob = gzip.compress(header + arr.tobytes(), mtime=0)
            write_bytes_atomically(folder / f"{prefix}-{kind}-ubyte.gz", blob)
    return folder
