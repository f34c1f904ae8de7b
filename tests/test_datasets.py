"""CIFAR10 / MNIST loaders and augmentation, offline.

The archives are built here, independently of itlin_core, in the exact upstream on-disk
formats: CIFAR10's python-pickle batches (a dict with b'data' (N, 3072) uint8, each row the
red, green and blue 32x32 planes in row-major order, and b'labels') inside
cifar-10-python.tar.gz under cifar-10-batches-py/, and MNIST's idx files (big-endian header
with magic numbers 2051 / 2049), gzipped. The download is mocked at the HTTP boundary
(``itlin_core._download.urlopen``) and the canonical checksums are replaced by the fake
archives' own, so the real download-verify-extract-load path runs.
"""

import gzip
import hashlib
import io
import pickle
import re
import struct
import tarfile
import urllib.error

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import itlin_core as ic
from itlin_core import _download, datasets


# ----------------------------------------------------------------------------- fake upstream files

def cifar_batch_bytes(images, labels, name="batch"):
    """A CIFAR10 batch as the upstream pickle: rows are R, G, B planes of 32x32, row-major."""
    data = np.asarray(images).transpose(0, 3, 1, 2).reshape(len(images), 3072)
    batch = {b"batch_label": name.encode(), b"labels": [int(v) for v in labels], b"data": data,
             b"filenames": [b"img_%d.png" % i for i in range(len(images))]}
    raw = pickle.dumps(batch, protocol=2)
    # The upstream files were written by Python 2 / NumPy 1, whose arrays name the module
    # numpy.core.multiarray; write that name so the loader is tested on it.
    return raw.replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def random_cifar(rng, n):
    return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)


def cifar_archive(rng, train_sizes=(4, 3, 5, 2, 6), n_test=5):
    """(tar.gz bytes, {member name: file bytes}, expected dict) in the upstream layout."""
    members, xs, ys = {}, [], []
    for i, n in enumerate(train_sizes, start=1):
        x, y = random_cifar(rng, n)
        members[f"data_batch_{i}"] = cifar_batch_bytes(x, y)
        xs.append(x), ys.append(y)
    x_test, y_test = random_cifar(rng, n_test)
    members["test_batch"] = cifar_batch_bytes(x_test, y_test)
    members["batches.meta"] = pickle.dumps({b"label_names": [b"airplane"] * 10}, protocol=2)
    members["readme.html"] = b"<html></html>"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py")
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        for name, raw in members.items():
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    expected = {"x_train": np.concatenate(xs), "y_train": np.concatenate(ys), "x_test": x_test, "y_test": y_test}
    return buf.getvalue(), members, expected


def idx_bytes(array, type_code=0x08):
    array = np.asarray(array)
    header = bytes([0, 0, type_code, array.ndim]) + b"".join(struct.pack(">I", d) for d in array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def mnist_files(rng, n_train=7, n_test=4, size=28):
    files, expected = {}, {}
    for split, prefix, n in (("train", "train", n_train), ("test", "t10k", n_test)):
        x = rng.integers(0, 256, (n, size, size), dtype=np.uint8)
        y = rng.integers(0, 10, n).astype(np.uint8)
        files[f"{prefix}-images-idx3-ubyte"] = idx_bytes(x)
        files[f"{prefix}-labels-idx1-ubyte"] = idx_bytes(y)
        expected[f"x_{split}"], expected[f"y_{split}"] = x[..., None], y
    return files, expected


def md5(raw):
    return hashlib.md5(raw).hexdigest()


class Response(io.BytesIO):
    def __init__(self, raw):
        super().__init__(raw)
        self.headers = {"Content-Length": str(len(raw))}


@pytest.fixture
def server(monkeypatch):
    """Serve ``server.files[url]`` through the mocked HTTP boundary; record requested URLs.
    A missing URL is a 404; ``server.offline = True`` makes every request fail like no network."""

    class Server:
        files, requested, offline = {}, [], False

    s = Server()
    s.files, s.requested = {}, []

    def fake_urlopen(url, timeout=60.0):
        s.requested.append(url)
        if s.offline:
            raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")
        if url not in s.files:
            raise urllib.error.HTTPError(url, 404, "Not Found", {}, None)
        return Response(s.files[url])

    monkeypatch.setattr(_download, "urlopen", fake_urlopen)
    return s


@pytest.fixture
def fake_cifar(server, monkeypatch):
    """A fake CIFAR10 archive served at the canonical URL with its checksums installed."""
    archive, members, expected = cifar_archive(np.random.default_rng(0))
    monkeypatch.setitem(datasets.CHECKSUMS, "cifar-10-python.tar.gz", ("md5", md5(archive)))
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"):
        monkeypatch.setitem(datasets.CHECKSUMS, name, ("md5", md5(members[name])))
    server.files[datasets.CIFAR10_URLS[0]] = archive
    return archive, members, expected


def assert_same(got, expected):
    assert set(got) == {"x_train", "y_train", "x_test", "y_test"}
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k])
    assert got["x_train"].dtype == np.uint8 and got["y_train"].dtype == np.int32


# ----------------------------------------------------------------------------- CIFAR10

def test_cifar10_download_verify_extract_load(tmp_path, server, fake_cifar):
    archive, members, expected = fake_cifar
    got = ic.data.cifar10(tmp_path, progress="off")
    assert_same(got, expected)
    assert got["x_train"].shape == (20, 32, 32, 3)
    # NHWC from the row layout: pixel (r, c) of channel ch is byte ch * 1024 + r * 32 + c of its row
    rows = pickle.loads(members["data_batch_1"], encoding="bytes")[b"data"]
    n, r, c, ch = 2, 5, 17, 2
    assert got["x_train"][n, r, c, ch] == rows[n, ch * 1024 + r * 32 + c]
    assert (tmp_path / "cifar-10-python.tar.gz").read_bytes() == archive
    assert not list(tmp_path.rglob("*.part"))
    assert server.requested == [datasets.CIFAR10_URLS[0]]
    # a second call is served from the cache, verified, without the network
    server.offline = True
    assert_same(ic.data.cifar10(tmp_path), expected)
    assert len(server.requested) == 1


def test_cifar10_default_dir_from_environment(tmp_path, server, fake_cifar, monkeypatch):
    monkeypatch.setenv("ITLIN_DATA_DIR", str(tmp_path / "cache"))
    assert datasets.default_data_dir() == tmp_path / "cache"
    assert_same(ic.data.cifar10(), fake_cifar[2])
    assert (tmp_path / "cache" / "cifar-10-batches-py" / "test_batch").exists()


@pytest.mark.parametrize("damage", ["flipped byte", "truncated"])
def test_corrupt_download_is_rejected_and_removed(tmp_path, server, fake_cifar, monkeypatch, damage):
    archive = bytearray(fake_cifar[0])
    if damage == "flipped byte":
        archive[len(archive) // 2] ^= 0xFF
    else:
        archive = archive[: len(archive) // 2]
    server.files[datasets.CIFAR10_URLS[0]] = bytes(archive)
    with pytest.raises(datasets.DatasetUnavailableError, match="corrupt or incomplete"):
        ic.data.cifar10(tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing kept: no archive, no .part, no extraction
    # with a good mirror after the bad one, the good copy is used
    good = "https://mirror.example/cifar-10-python.tar.gz"
    server.files[good] = fake_cifar[0]
    monkeypatch.setattr(datasets, "CIFAR10_URLS", (datasets.CIFAR10_URLS[0], good))
    assert_same(ic.data.cifar10(tmp_path), fake_cifar[2])


def test_a_damaged_archive_on_disk_gives_a_clear_error_and_keeps_the_good_batches(tmp_path, server, fake_cifar):
    """An archive put on disk by hand (verify=False, no download) that is emptied, truncated or has
    a byte flipped: loading raises DatasetError saying to delete it, leaves no empty or partial
    folder, and batches extracted earlier from a good archive are not touched."""
    good = fake_cifar[0]
    archive = tmp_path / "cifar-10-python.tar.gz"
    damaged = [b"", good[:len(good) // 2], good[:-10]]
    damaged += [good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1:] for i in (20, len(good) // 3, len(good) - 12)]
    server.offline = True
    for data in damaged:
        archive.write_bytes(data)
        with pytest.raises(datasets.DatasetError, match="delete it"):
            ic.data.cifar10(tmp_path, verify=False)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-python.tar.gz"]
    archive.write_bytes(good)
    assert_same(ic.data.cifar10(tmp_path, verify=False), fake_cifar[2])
    before = {p.name: p.read_bytes() for p in (tmp_path / "cifar-10-batches-py").iterdir()}
    archive.write_bytes(good[:len(good) // 2])
    with pytest.raises(datasets.DatasetError, match="delete it"):
        datasets._extract_cifar(archive, tmp_path)                 # a re-extraction that fails halfway
    assert {p.name: p.read_bytes() for p in (tmp_path / "cifar-10-batches-py").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar-10-batches-py", "cifar-10-python.tar.gz"]


def test_a_data_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("")
    for loader in (ic.data.cifar10, ic.data.mnist):
        with pytest.raises(ValueError, match="data_dir .* must be a folder"):
            loader(tmp_path / "file", verify=False)


def test_a_stalled_mirror_is_given_up_after_the_download_timeout(monkeypatch):
    seen = []
    monkeypatch.setattr(_download.urllib.request, "urlopen", lambda request, timeout: seen.append(timeout))
    _download.urlopen("https://example.invalid/x")
    assert seen == [_download.DOWNLOAD_TIMEOUT] and _download.DOWNLOAD_TIMEOUT <= 20


def test_leftover_part_file_is_never_used(tmp_path, server, fake_cifar):
    part = tmp_path / "cifar-10-python.tar.gz.part"
    part.write_bytes(fake_cifar[0])  # even complete bytes under .part are not trusted
    server.offline = True
    with pytest.raises(datasets.DatasetUnavailableError):
        ic.data.cifar10(tmp_path)
    assert not part.exists() and not (tmp_path / "cifar-10-batches-py").exists()
    part.write_bytes(fake_cifar[0][:100])  # an interrupted download
    server.offline = False
    assert_same(ic.data.cifar10(tmp_path), fake_cifar[2])
    assert not part.exists()


def test_offline_without_cache_says_where_to_put_the_files(tmp_path, server):
    server.offline = True
    with pytest.raises(datasets.DatasetUnavailableError) as info:
        ic.data.cifar10(tmp_path / "c")
    assert isinstance(info.value, RuntimeError)
    msg = str(info.value)
    for needed in (str(tmp_path / "c" / "cifar-10-python.tar.gz"), str(tmp_path / "c" / "cifar-10-batches-py"),
                   datasets.CIFAR10_URLS[0], "ITLIN_DATA_DIR", "Temporary failure"):
        assert needed in msg, needed
    with pytest.raises(datasets.DatasetUnavailableError) as info:
        ic.data.mnist(tmp_path / "m")
    msg = str(info.value)
    for needed in [str(tmp_path / "m" / "mnist"), *(n + ".gz" for n in datasets.MNIST_FILES)]:
        assert needed in msg, needed
    assert all(m + "train-images-idx3-ubyte.gz" in server.requested for m in datasets.MNIST_MIRRORS)


def test_verify_rejects_changed_files_and_keeps_them(tmp_path, server, fake_cifar):
    ic.data.cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    x, y = random_cifar(np.random.default_rng(5), 3)
    batch.write_bytes(cifar_batch_bytes(x, y))
    with pytest.raises(datasets.ChecksumError, match="verify=False"):
        ic.data.cifar10(tmp_path)
    assert batch.exists()
    got = ic.data.cifar10(tmp_path, verify=False)  # the changed file, loaded as it is
    np.testing.assert_array_equal(got["x_train"][4 + 3:4 + 3 + 3], x)


def test_cifar10_verify_false_any_number_and_size_of_batches(tmp_path, server):
    server.offline = True
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    parts = {}
    for i, n in ((1, 7), (2, 1), (10, 12)):  # numeric order 1, 2, 10 (not 1, 10, 2)
        parts[i] = random_cifar(rng, n)
        (folder / f"data_batch_{i}").write_bytes(cifar_batch_bytes(*parts[i]))
    x_test, y_test = random_cifar(rng, 3)
    (folder / "test_batch").write_bytes(cifar_batch_bytes(x_test, y_test))
    expected = {"x_train": np.concatenate([parts[i][0] for i in (1, 2, 10)]),
                "y_train": np.concatenate([parts[i][1] for i in (1, 2, 10)]), "x_test": x_test, "y_test": y_test}
    assert_same(ic.data.cifar10(tmp_path, verify=False), expected)
    # the batches directly in data_dir work too
    assert_same(ic.data.cifar10(folder, verify=False), expected)
    # verify=True on a partial set: the error says to use verify=False
    with pytest.raises(datasets.DatasetUnavailableError, match="verify=False"):
        ic.data.cifar10(tmp_path)
    assert server.requested  # it did try to fetch the canonical archive


def test_cifar_batch_format_errors(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    x, y = random_cifar(np.random.default_rng(2), 2)
    (folder / "data_batch_1").write_bytes(cifar_batch_bytes(x, y))
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ValueError, match=r"\(N, 3072\)"):
        ic.data.cifar10(tmp_path, verify=False)
    (folder / "test_batch").write_bytes(cifar_batch_bytes(x, [0, 12]))
    with pytest.raises(ValueError, match="0..9"):
        ic.data.cifar10(tmp_path, verify=False)
    # a pickle that would build anything other than arrays is refused, not executed
    import collections
    (folder / "test_batch").write_bytes(pickle.dumps(collections.OrderedDict(a=1)))
    with pytest.raises(ValueError, match="refusing"):
        ic.data.cifar10(tmp_path, verify=False)


def test_progress_bar_text(tmp_path, server, fake_cifar, capsys):
    ic.data.cifar10(tmp_path, progress="text")
    assert "cifar-10-python.tar.gz" in capsys.readouterr().err


# ----------------------------------------------------------------------------- MNIST

@pytest.fixture
def fake_mnist(server, monkeypatch):
    files, expected = mnist_files(np.random.default_rng(3))
    for name, raw in files.items():
        gz = gzip.compress(raw)
        monkeypatch.setitem(datasets.CHECKSUMS, name + ".gz", ("md5", md5(gz)))
        server.files[datasets.MNIST_MIRRORS[1] + name + ".gz"] = gz  # the first mirror answers 404
    return files, expected


def test_mnist_download_with_mirror_fallback(tmp_path, server, fake_mnist):
    got = ic.data.mnist(tmp_path)
    assert_same(got, fake_mnist[1])
    assert got["x_train"].shape == (7, 28, 28, 1)
    assert sorted(p.name for p in (tmp_path / "mnist").iterdir()) == sorted(n + ".gz" for n in datasets.MNIST_FILES)
    assert datasets.MNIST_MIRRORS[0] + "train-images-idx3-ubyte.gz" in server.requested
    server.offline = True
    assert_same(ic.data.mnist(tmp_path), fake_mnist[1])


def test_mnist_corrupt_download_rejected(tmp_path, server, fake_mnist):
    url = datasets.MNIST_MIRRORS[1] + "t10k-labels-idx1-ubyte.gz"
    server.files[url] = server.files[url][:-3]
    with pytest.raises(datasets.DatasetUnavailableError, match="corrupt or incomplete"):
        ic.data.mnist(tmp_path)
    assert not (tmp_path / "mnist" / "t10k-labels-idx1-ubyte.gz").exists()
    assert not list(tmp_path.rglob("*.part"))


def test_mnist_verify_false_uncompressed_any_size(tmp_path, server):
    server.offline = True
    files, expected = mnist_files(np.random.default_rng(4), n_train=9, n_test=2, size=12)
    for name, raw in files.items():  # mixed: some plain, some gzipped, directly in data_dir
        path = tmp_path / (name + (".gz" if "labels" in name else ""))
        path.write_bytes(gzip.compress(raw) if "labels" in name else raw)
    assert_same(ic.data.mnist(tmp_path, verify=False), expected)
    with pytest.raises(datasets.DatasetUnavailableError, match="verify=False"):
        ic.data.mnist(tmp_path)  # uncompressed files have no canonical checksum


def test_read_idx_header_and_validation(tmp_path):
    values = np.arange(-6, 6, dtype=np.int32).reshape(3, 4) * 1000003
    np.testing.assert_array_equal(datasets.read_idx(idx_bytes(values, 0x0C)), values)
    (tmp_path / "f.gz").write_bytes(gzip.compress(idx_bytes(values.astype(np.float32), 0x0D)))
    np.testing.assert_array_equal(datasets.read_idx(tmp_path / "f.gz"), values.astype(np.float32))
    good = idx_bytes(np.zeros((2, 3, 3), np.uint8))
    assert struct.unpack(">I", good[:4])[0] == 2051
    with pytest.raises(ValueError, match="magic number"):
        datasets.read_idx(b"\x01" + good[1:])
    with pytest.raises(ValueError, match="magic number"):
        datasets.read_idx(good[:2] + b"\x07" + good[3:])
    with pytest.raises(ValueError, match="truncated"):
        datasets.read_idx(good[:-1])
    with pytest.raises(ValueError, match="truncated"):
        datasets.read_idx(good + b"\x00")


def test_mnist_label_count_must_match(tmp_path):
    files, _ = mnist_files(np.random.default_rng(6))
    files["t10k-labels-idx1-ubyte"] = idx_bytes(np.zeros(3, np.uint8))
    for name, raw in files.items():
        (tmp_path / name).write_bytes(raw)
    with pytest.raises(ValueError, match="one per image"):
        ic.data.mnist(tmp_path, verify=False)


def test_stand_in_data_round_trip(tmp_path):
    folder = datasets.write_stand_in("cifar10", tmp_path, n_train=23, n_test=7, batches=4)
    assert sorted(p.name for p in folder.iterdir()) == ["data_batch_1", "data_batch_2", "data_batch_3",
                                                        "data_batch_4", "test_batch"]
    d = ic.data.cifar10(tmp_path, verify=False)
    assert d["x_train"].shape == (23, 32, 32, 3) and d["x_test"].shape == (7, 32, 32, 3)
    datasets.write_stand_in("mnist", tmp_path, n_train=11, n_test=5)
    m = ic.data.mnist(tmp_path, verify=False)
    assert m["x_train"].shape == (11, 28, 28, 1) and m["y_test"].shape == (5,)
    # the images carry their class: nearest class mean (from training data) beats chance on test
    means = np.stack([d["x_train"][d["y_train"] == c].mean(0) if (d["y_train"] == c).any()
                      else np.full((32, 32, 3), np.inf) for c in range(10)])
    pred = np.argmin(((d["x_test"][:, None].astype(float) - means[None]) ** 2).sum((2, 3, 4)), axis=1)
    assert (pred == d["y_test"]).mean() > 0.5


@pytest.mark.parametrize("name", ["cifar10", "mnist"])
def test_stand_in_data_never_replace_files_already_there(tmp_path, name):
    """The real data set in the folder (here: files of other contents) survive a stand-in write,
    which refuses before writing anything; ``overwrite=True`` replaces them."""
    folder = datasets.write_stand_in(name, tmp_path, n_train=12, n_test=4, batches=2)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(ValueError, match="already holds .*overwrite=True"):
        datasets.write_stand_in(name, tmp_path, n_train=30, n_test=9, batches=2, seed=1)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before      # untouched, nothing added
    datasets.write_stand_in(name, tmp_path, n_train=30, n_test=9, batches=2, seed=1, overwrite=True)
    assert (ic.data.cifar10 if name == "cifar10" else ic.data.mnist)(tmp_path, verify=False)["y_test"].shape == (9,)


def _real_in_another_layout(root, layout):
    """Files standing for the real data set in a layout the stand-in does not write itself."""
    files = {"mnist flat gz": [f"{n}.gz" for n in datasets.MNIST_FILES],
             "mnist flat idx": list(datasets.MNIST_FILES),
             "mnist/ uncompressed": [f"mnist/{n}" for n in datasets.MNIST_FILES],
             "cifar archive": [datasets.CIFAR10_ARCHIVE],
             "cifar flat": [*datasets.CIFAR10_TRAIN, datasets.CIFAR10_TEST],
             "cifar extra batches": [f"{datasets.CIFAR10_FOLDER}/data_batch_{i}" for i in (3, 4, 5)]}[layout]
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_bytes(b"REAL " + f.encode())
    return {f: root / f for f in files}


@pytest.mark.parametrize("layout", ["mnist flat gz", "mnist flat idx", "mnist/ uncompressed", "cifar archive",
                                    "cifar flat", "cifar extra batches"])
def test_stand_in_data_never_hide_the_real_data_in_another_layout(tmp_path, layout):
    """Real files the loader reads in place of, or together with, the stand-in (or that the stand-in
    would hide from the loader) are refused and left as they were, unless overwrite=True (which
    deletes only CIFAR10 batches beyond ``batches``, which the loader would mix in)."""
    name = "mnist" if layout.startswith("mnist") else "cifar10"
    real = _real_in_another_layout(tmp_path, layout)
    with pytest.raises(ValueError, match=f"already holds .*{re.escape(next(iter(real)))}.*overwrite=True"):
        datasets.write_stand_in(name, tmp_path, n_train=12, n_test=4, batches=2)
    assert all(p.read_bytes() == b"REAL " + f.encode() for f, p in real.items())
    assert {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()} == set(real)
    datasets.write_stand_in(name, tmp_path, n_train=12, n_test=4, batches=2, overwrite=True)
    assert (ic.data.cifar10 if name == "cifar10" else ic.data.mnist)(tmp_path, verify=False)["y_train"].shape == (12,)


@pytest.mark.parametrize("kw, says", [
    (dict(n_train=0), "n_train must be a positive integer"), (dict(n_train=2.5), "n_train must be a positive"),
    (dict(n_train="5"), "n_train must be a positive"), (dict(n_test=True), "n_test must be a positive"),
    (dict(batches=1.5), "batches must be a positive"), (dict(batches=13), "batches must be at most n_train"),
], ids=["n_train 0", "n_train 2.5", "n_train str", "n_test bool", "batches 1.5", "batches > n_train"])
def test_stand_in_sizes_are_whole_numbers(tmp_path, kw, says):
    with pytest.raises(ValueError, match=says):
        datasets.write_stand_in("cifar10", tmp_path, **{"n_train": 12, "n_test": 4, "batches": 2, **kw})
    assert not list(tmp_path.iterdir())


def test_stand_in_data_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    for where in (tmp_path / "file", tmp_path / "file" / "below"):
        with pytest.raises(ValueError, match="data_dir must be a folder, but .*file is a file"):
            datasets.write_stand_in("mnist", where, n_train=12, n_test=4)


# ----------------------------------------------------------------------------- augmentation

def unique_images(n=16, h=8, w=6, c=2):
    """Images whose pixels are all distinct and non-zero, so a window is identified exactly."""
    return (jnp.arange(n * h * w * c, dtype=jnp.float32).reshape(n, h, w, c) + 1.0)


def window_offsets(out, img, padding):
    """All (dy, dx) with out == pad(img)[dy:dy+h, dx:dx+w] (NumPy, independent of the code)."""
    out, img = np.asarray(out), np.asarray(img)
    h, w = img.shape[:2]
    padded = np.pad(img, ((padding, padding), (padding, padding), (0, 0)))
    return [(dy, dx) for dy in range(2 * padding + 1) for dx in range(2 * padding + 1)
            if np.array_equal(padded[dy:dy + h, dx:dx + w], out)]


def test_random_crop_is_a_window_of_the_padded_image():
    x = unique_images(n=32)
    out = ic.random_crop(jax.random.PRNGKey(0), x, padding=2)
    assert out.shape == x.shape and out.dtype == x.dtype
    offsets = [window_offsets(o, i, 2) for o, i in zip(out, x)]
    assert all(len(o) == 1 for o in offsets)  # exactly one window matches
    assert len({o[0] for o in offsets}) > 5  # offsets vary per image (25 possible)


def test_random_flip_is_an_exact_mirror():
    x = unique_images(n=64)
    out = np.asarray(ic.random_flip(jax.random.PRNGKey(1), x))
    same = [np.array_equal(o, i) for o, i in zip(out, np.asarray(x))]
    mirrored = [np.array_equal(o, i[:, ::-1, :]) for o, i in zip(out, np.asarray(x))]
    assert all(s != m for s, m in zip(same, mirrored))  # each image is one or the other
    assert 0 < sum(mirrored) < len(x)


def test_augment_properties_and_jit():
    x = jnp.asarray(np.random.default_rng(0).integers(1, 256, (24, 8, 8, 3)), jnp.uint8)
    key = jax.random.PRNGKey(2)
    out = ic.augment(key, x)
    assert out.shape == x.shape and out.dtype == jnp.uint8
    for o, i in zip(np.asarray(out), np.asarray(x)):
        assert window_offsets(o, i, 4) or window_offsets(o[:, ::-1], i, 4)
    np.testing.assert_array_equal(ic.augment(key, x), out)  # deterministic under a key
    assert not np.array_equal(ic.augment(jax.random.PRNGKey(3), x), out)  # other keys differ
    jitted = jax.jit(ic.augment, static_argnums=(2, 3))
    np.testing.assert_array_equal(jitted(key, x, 4, True), out)
    np.testing.assert_array_equal(ic.augment(key, x, padding=0, flip=False), x)


def test_normalise_with_channel_stats():
    x = np.random.default_rng(1).integers(0, 256, (50, 6, 5, 3), dtype=np.uint8)
    x[..., 2] //= 4  # channels with different statistics
    mean, std = ic.channel_stats(x)
    flat = x.reshape(-1, 3) / 255.0
    np.testing.assert_allclose(mean, flat.mean(0), rtol=1e-12)
    np.testing.assert_allclose(std, flat.std(0), rtol=1e-12)
    z = np.asarray(ic.normalise(x, mean, std), np.float64).reshape(-1, 3)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(z.std(0), 1.0, atol=1e-5)


def test_augmented_minibatches_pairs_images_with_their_labels():
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.integers(1, 256, (40, 8, 8, 3)), jnp.uint8)
    y = jnp.arange(40)  # label = index, so each image's source is known
    batch = jax.jit(ic.augmented_minibatches(jax.random.PRNGKey(0), x, y, 8, padding=0))
    xb, yb = batch(3)
    assert xb.shape == (8, 8, 8, 3)
    for img, j in zip(np.asarray(xb), np.asarray(yb)):
        src = np.asarray(x[j])
        assert np.array_equal(img, src) or np.array_equal(img, src[:, ::-1])
    np.testing.assert_array_equal(batch(3)[0], xb)  # batch i is a function of (key, i)
    mean, std = ic.channel_stats(x)
    norm = ic.augmented_minibatches(jax.random.PRNGKey(0), x, y, 8, padding=0, mean=mean, std=std)(3)
    np.testing.assert_allclose(norm[0], ic.normalise(xb, mean, std), rtol=1e-6)
    with pytest.raises(ValueError, match="both mean and std"):
        ic.augmented_minibatches(jax.random.PRNGKey(0), x, y, 8, mean=mean)
