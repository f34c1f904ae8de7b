"""Verified downloads into a cache folder: the one place that touches the network.

A download goes to ``<name>.part``, is hashed while it streams, and is renamed to its final
name (an atomic :func:`os.replace`) only when its checksum equals the expected one; a mismatch
deletes the ``.part`` file and tries the next URL. A ``.part`` file left by an interrupted run
is never read: it is deleted before a new download. Tests replace :func:`urlopen`.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zlib
from pathlib import Path

from ._progress import progress_bar

CHUNK = 1 << 20
#: Seconds a mirror may take to connect, or to send the next block, before the next mirror is
#: tried (a stalled server would otherwise hold a download for minutes).
DOWNLOAD_TIMEOUT = 15.0


class DatasetError(RuntimeError):
    """Base class of the data-loading errors below."""


class DatasetUnavailableError(DatasetError):
    """The data set is not on disk and could not be downloaded; the message says where to put
    which file."""


class ChecksumError(DatasetError):
    """A file on disk does not have its canonical checksum (with ``verify=True``)."""


def default_data_dir() -> Path:
    """The cache folder: ``$ITLIN_DATA_DIR`` if set, else ``~/.cache/itlin_core``."""
    env = os.environ.get("ITLIN_DATA_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "itlin_core"


def data_root(data_dir) -> Path:
    """``data_dir`` (``~`` expanded), or :func:`default_data_dir` when it is ``None``."""
    root = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if root.exists() and not root.is_dir():
        raise ValueError(f"data_dir (or $ITLIN_DATA_DIR) must be a folder, but {root} is a file.")
    return root


def hash_file(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def check_file(path: Path, checksum: tuple[str, str], name: str | None = None) -> None:
    """Raise ChecksumError unless ``path`` has ``checksum = (algorithm, hex digest)``, the
    canonical checksum of the file called ``name`` (default: ``path``'s name)."""
    name = name or path.name
    algorithm, expected = checksum
    got = hash_file(path, algorithm)
    if got != expected:
        raise ChecksumError(
            f"{path} has {algorithm.upper()} {got}, but the canonical {name} has {expected}. "
            f"If it is a deliberate subset or stand-in, load it with verify=False; otherwise "
            f"delete it and it will be downloaded again.")


def urlopen(url: str, timeout: float = DOWNLOAD_TIMEOUT):
    """Open ``url`` for reading (the only function that touches the network; tests replace it)."""
    request = urllib.request.Request(url, headers={"User-Agent": "itlin_core"})
    return urllib.request.urlopen(request, timeout=timeout)


def download(urls, dest: Path, checksum: tuple[str, str], progress) -> list[str]:
    """Download the first of ``urls`` whose bytes have ``checksum`` to ``dest``. Returns ``[]``
    on success, else one line per failed attempt."""
    algorithm, expected = checksum
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for url in urls:
        part.unlink(missing_ok=True)  # a leftover from an interrupted run is never used
        h = hashlib.new(algorithm)
        try:
            with urlopen(url) as response, open(part, "wb") as out:
                headers = getattr(response, "headers", None)
                length = headers.get("Content-Length") if headers is not None else None
                bar = progress_bar(int(length) if length else None, dest.name, progress, unit_bytes=True)
                try:
                    for block in iter(lambda: response.read(CHUNK), b""):
                        out.write(block)
                        h.update(block)
                        if bar is not None:
                            bar.update(len(block))
                finally:
                    if bar is not None:
                        bar.close()
                out.flush()
                os.fsync(out.fileno())
        except (OSError, http.client.HTTPException, ValueError) as e:  # URLError is an OSError
            part.unlink(missing_ok=True)
            failures.append(f"{url}: {e}")
            continue
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        got = h.hexdigest()
        if got != expected:
            part.unlink(missing_ok=True)
            failures.append(f"{url}: the download is corrupt or incomplete ({algorithm.upper()} {got}, "
                            f"expected {expected}); it was deleted")
            continue
        os.replace(part, dest)
        return []
    return failures


def ensure(path: Path, urls, checksum: tuple[str, str], verify: bool, progress, where_to_put: str) -> Path:
    """``path`` itself if it exists (checked against ``checksum`` when ``verify``), else
    downloaded and verified; DatasetUnavailableError (with ``where_to_put``) if that fails."""
    if path.exists():
        if verify:
            check_file(path, checksum)
        return path
    failures = download(urls, path, checksum, progress)
    if failures:
        raise DatasetUnavailableError(
            f"{path.name} is not in {path.parent} and could not be downloaded:\n  "
            + "\n  ".join(failures) + f"\n{where_to_put}")
    return path


def extract_folder(archive: Path, root: Path, folder_name: str) -> Path:
    """Extract the plain files under ``folder_name/`` of the tar.gz ``archive`` into
    ``root/folder_name`` (anything else, links and nested paths included, is skipped). Everything
    is read into a private temporary folder first and moved into place only when the whole
    archive was read, so a truncated or damaged archive leaves no empty or partial folder and
    never replaces files that were there; it raises DatasetError saying to delete it."""
    folder = root / folder_name
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder_name}-", dir=root))
    try:
        try:
            with gzip.open(archive) as whole:   # the gzip CRC, which tarfile never reaches, catches any damage
                while whole.read(CHUNK):
                    pass
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar.getmembers():
                    parts = Path(member.name).parts
                    if not member.isfile() or len(parts) != 2 or parts[0] != folder_name or parts[1] in ("..", "."):
                        continue
                    with tar.extractfile(member) as src, open(tmp / parts[1], "wb") as dst:
                        shutil.copyfileobj(src, dst, CHUNK)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise DatasetError(f"{archive} is not a readable tar.gz archive ({type(e).__name__}: {e}); it is "
                               "damaged or incomplete: delete it (it is downloaded again with verify=True).") from None
        if not any(tmp.iterdir()):
            raise DatasetError(f"{archive} holds no {folder_name}/ files; delete it or replace it.")
        folder.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            os.replace(f, folder / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
