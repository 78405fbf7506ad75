"""Where the results root lives: a path on this machine, or a pyarrow filesystem URI.

``results_dir`` is either a local path (the default, ``results``; a shared POSIX mount
such as NFS is a local path too) or a URI that ``pyarrow.fs.FileSystem.from_uri``
understands: ``file:///abs/path``, ``s3://bucket/prefix``, ``gs://bucket/prefix``,
``hdfs://namenode:8020/path``, ``abfs://container@account.dfs.core.windows.net/path``,
``fsspec+<protocol>://...``. A URI stays a string in the configuration: pathlib would
turn ``s3://b`` into ``s3:/b``.

`ResultsRoot` is the one place that turns a root into (filesystem, base path) and does
the store's I/O. It publishes a file in one of two ways:

* **Local roots** (plain paths and ``file://`` URIs): the bytes go to a hidden temporary
  file in the destination folder, mode 0644, which is then renamed over the final name
  (``os.replace``), so a reader or a crash never sees half a file.
* **Any other filesystem**: the file, already serialized in memory, is written with one
  ``open_output_stream``. Object stores (S3, GCS, Azure Blob) publish an object only when
  its upload completes, so readers never see half a file there either, and a failed
  upload publishes nothing. HDFS and fsspec filesystems make no such promise: a reader
  may see a file while it is being written.

Nothing here touches the network until the store is first used: an ``s3://`` URI
without ``?region=`` makes pyarrow ask S3 for the bucket's region, and ``hdfs://``
connects, when the filesystem is resolved.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

# Schemes FileSystem.from_uri resolves to a filesystem that persists (not "mock": a fresh,
# empty in-memory one on every call), plus fsspec+<protocol>.
URI_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SECRET_QUERY = re.compile(r"secret|key|token|passw|credential|sig=", re.IGNORECASE)


def is_uri(root: str | Path) -> bool:
    """A ``scheme://`` string; a Path never is one (pathlib has already mangled it)."""
    return isinstance(root, str) and _URI.match(root) is not None


def results_root_value(value: object) -> object:
    """The configuration's `results_dir`: a Path, or a URI kept as a string.

    The URI is checked, not resolved (resolving S3 or HDFS may need the network).
    Credentials in it are refused: the configuration is recorded with every run.
    """
    if isinstance(value, Path) or not isinstance(value, str):
        return value
    if not is_uri(value):
        return Path(value)
    parts = urlsplit(value)
    scheme = parts.scheme.lower()
    if scheme not in URI_SCHEMES and not scheme.startswith("fsspec+"):
        raise ValueError(
            f"{value!r}: {scheme}:// is not a filesystem results can live on; use a local "
            f"path or one of {', '.join(s + '://' for s in URI_SCHEMES)}, fsspec+<protocol>://"
        )
    if parts.password is not None or _SECRET_QUERY.search(parts.query):
        raise ValueError(
            "credentials do not belong in the URI (it is recorded with every "
            "run); give them through the environment, e.g. AWS_ACCESS_KEY_ID/"
            "AWS_SECRET_ACCESS_KEY, ~/.aws/credentials or the instance role"
        )
    if scheme == "file" and parts.netloc not in ("", "localhost"):
        raise ValueError(
            f"{value!r}: a file URI names an absolute path on this machine, file:///abs/path"
        )
    if " " in value:
        raise ValueError(f"{value!r}: percent-encode spaces in a URI (%20)")
    return value


def local_path(root: str | Path) -> Path | None:
    """The root as a path on this machine: a plain path, or a ``file://`` URI's path;
    None for a root on any other filesystem."""
    if not is_uri(root):
        return Path(root)
    parts = urlsplit(str(root))
    return Path(unquote(parts.path)) if parts.scheme.lower() == "file" else None


class ResultsRoot:
    """A results root: its filesystem (resolved on first use), base path, and the I/O the
    store needs, with paths relative to the root (``levels/<run_id>/<file>``).

    `root` is a Path for a local root (a ``file://`` URI becomes its path), else the URI
    as given. Paths handed out (`public`) are Paths for a local root and
    ``scheme://host/path`` strings (the URI's query left out) for any other.
    With `filesystem`, `root` is a path inside that filesystem (e.g. an ``S3FileSystem``
    built with a role ARN, or a ``SubTreeFileSystem``).
    """

    def __init__(self, root: str | Path, filesystem: FileSystem | None = None) -> None:
        self._fs = filesystem
        self._base: str | None = None
        if filesystem is not None:
            from pyarrow.fs import LocalFileSystem

            self.local = Path(root) if isinstance(filesystem, LocalFileSystem) else None
            self.root: Path | str = self.local if self.local is not None else str(root)
            self._base = str(root).rstrip("/") or "/"
            self._display = self._base.rstrip("/")
            return
        self.local = local_path(root)
        self.root = self.local if self.local is not None else str(root)
        if self.local is None:
            parts = urlsplit(str(root))
            self._display = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"

    def _resolve(self) -> tuple[FileSystem, str]:
        if self._fs is None or self._base is None:
            from pyarrow.fs import FileSystem, LocalFileSystem

            if self.local is not None:
                self._fs, self._base = LocalFileSystem(), str(self.local)
            else:
                fs, base = FileSystem.from_uri(str(self.root))
                self._fs, self._base = fs, base.rstrip("/") or "/"
        return self._fs, self._base

    @property
    def filesystem(self) -> FileSystem:
        """Resolved on first use: may ask the network (S3 region, HDFS connection)."""
        return self._resolve()[0]

    def path(self, rel: str) -> str:
        """`rel` inside the filesystem."""
        base = self._resolve()[1]
        return f"{base.rstrip('/')}/{rel}" if rel else base

    def public(self, rel: str) -> Path | str:
        """`rel` as users see it: a Path for a local root, else a URI-like string."""
        if self.local is not None:
            return self.local / rel if rel else self.local
        return f"{self._display}/{rel}" if rel else self._display

    def exists(self, rel: str) -> bool:
        from pyarrow.fs import FileType

        return self.filesystem.get_file_info(self.path(rel)).type != FileType.NotFound

    def _listing(self, rel: str, recursive: bool) -> list:
        from pyarrow.fs import FileSelector

        selector = FileSelector(self.path(rel), allow_not_found=True, recursive=recursive)
        try:
            return self.filesystem.get_file_info(selector)
        except NotADirectoryError:  # a file where the folder should be: nothing stored
            return []

    def files(self, rel: str, suffix: str, recursive: bool = True) -> list[str]:
        """Filesystem paths of the files under `rel` whose names end in `suffix`, in path
        order (folder by folder, as sorted pathlib paths); none when `rel` is missing."""
        from pyarrow.fs import FileType

        found = [
            i.path
            for i in self._listing(rel, recursive)
            if i.type == FileType.File and i.base_name.endswith(suffix)
        ]
        return sorted(found, key=lambda p: p.split("/"))

    def folders(self, rel: str) -> list[str]:
        """Names of the folders directly under `rel` (object stores: common prefixes)."""
        from pyarrow.fs import FileType

        return [i.base_name for i in self._listing(rel, False) if i.type == FileType.Directory]

    def read_bytes(self, path: str) -> bytes:
        with self.filesystem.open_input_stream(path) as stream:
            return stream.read()

    def write(self, rel: str, data: bytes) -> Path | str:
        """Publish `data` at `rel`, whole or not at all (see the module docstring)."""
        if self.local is not None:
            _replace_into(self.local / rel, data)
        else:
            fs, path = self.filesystem, self.path(rel)
            try:
                out = fs.open_output_stream(path)
            except FileNotFoundError:  # a filesystem with real folders (HDFS, a subtree)
                fs.create_dir(path.rpartition("/")[0], recursive=True)
                out = fs.open_output_stream(path)
            with out:
                out.write(data)
        return self.public(rel)

    def delete(self, rel: str) -> None:
        self.filesystem.delete_file(self.path(rel))

    @property
    def is_local(self) -> bool:
        """Written with temp file + rename: a root on this machine's filesystem."""
        return self.local is not None


def _replace_into(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide results from a team's readers
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
