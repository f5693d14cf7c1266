"""Imports the nobroker package from the one compressed blob inside the single-file app.

Owns: the importer that build_pyz.py copies into dist/nobroker.pyz as
``_nobroker_bundle.py``. Imports: the standard library only (it runs before
nobroker exists on sys.path).

Why a blob: a zip compresses each file on its own, so a package of sixty
small modules pays sixty fresh starts of the compressor and sixty headers,
about 40 % more bytes than the same files compressed as one stream. The
bundle keeps the zipapp (PEP 441: any Python 3.11+ runs it, nothing is
installed) and stores the package inside it as one LZMA stream,
``nobroker.bundle``: a JSON index line of (path, size) pairs, then the files'
bytes in that order. ``install`` reads it into memory and puts a finder at the
front of sys.meta_path that serves ``nobroker`` and its submodules from it.
Nothing is unpacked to disk. Tracebacks and linecache get each module's source
from the loader (get_source); importlib.resources gets the data files (the
dashboard's page, the SQL migrations) through get_resource_reader.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import lzma
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import IO, Any

#: The top-level package the blob holds, and the blob's name inside the zip.
PACKAGE = "nobroker"
BLOB = "nobroker.bundle"

#: LZMA2 at its strongest, tuned for text: no position bits (pb=0: text has no
#: 2-, 4- or 8-byte structure), about 450 bytes smaller than the preset alone.
TEXT_FILTERS: list[dict[str, int]] = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "pb": 0}]


def pack(files: dict[str, bytes]) -> bytes:
    """The blob for ``files`` (POSIX paths relative to the zip's root, e.g. "nobroker/queue.py")."""
    names = sorted(files, key=lambda name: (name.rpartition(".")[2], name))  # like files together: a closer match
    index = json.dumps([[name, len(files[name])] for name in names], separators=(",", ":")).encode("utf-8")
    raw = index + b"\n" + b"".join(files[name] for name in names)
    return lzma.compress(raw, filters=TEXT_FILTERS)


def unpack(blob: bytes) -> dict[str, bytes]:
    """The files of a blob made by ``pack``."""
    raw = lzma.decompress(blob)
    head, _, body = raw.partition(b"\n")
    files: dict[str, bytes] = {}
    pos = 0
    for name, size in json.loads(head):
        files[name] = body[pos : pos + size]
        pos += size
    assert pos == len(body), "the index covers the blob exactly"
    return files


class BundlePath:
    """A file or folder of the blob, as importlib.resources wants it (a Traversable)."""

    def __init__(self, files: dict[str, bytes], path: str) -> None:
        self._files = files
        self._path = path.rstrip("/")

    @property
    def name(self) -> str:
        return self._path.rsplit("/", 1)[-1]

    def is_file(self) -> bool:
        return self._path in self._files

    def is_dir(self) -> bool:
        prefix = self._path + "/"
        return any(name.startswith(prefix) for name in self._files)

    def iterdir(self) -> Iterator[BundlePath]:
        prefix = self._path + "/"
        children = {name[len(prefix) :].split("/", 1)[0] for name in self._files if name.startswith(prefix)}
        for child in sorted(children):
            yield BundlePath(self._files, prefix + child)

    def joinpath(self, *parts: str) -> BundlePath:
        path = "/".join([self._path, *(p.strip("/") for p in parts if p)])
        return BundlePath(self._files, path)

    def __truediv__(self, child: str) -> BundlePath:
        return self.joinpath(child)

    def read_bytes(self) -> bytes:
        try:
            return self._files[self._path]
        except KeyError:
            raise FileNotFoundError(f"{self._path} is not in the bundle") from None

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def open(self, mode: str = "r", *args: Any, **kwargs: Any) -> IO[Any]:
        if mode not in ("r", "rb"):
            raise ValueError(f"the bundle is read-only; cannot open {self._path} with mode {mode!r}")
        data = io.BytesIO(self.read_bytes())
        return data if mode == "rb" else io.TextIOWrapper(data, *args, **kwargs)

    def __repr__(self) -> str:
        return f"BundlePath({self._path!r})"


class _Resources:
    """What importlib.resources asks a package's loader for: its files."""

    def __init__(self, root: BundlePath) -> None:
        self._root = root

    def files(self) -> BundlePath:
        return self._root


class BundleLoader(importlib.abc.Loader):
    """Runs one module of the blob; gives its source to linecache and its folder to importlib.resources."""

    def __init__(self, finder: BundleFinder, path: str, is_package: bool) -> None:
        self._finder = finder
        self._path = path
        self._is_package = is_package

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        code = compile(self._finder.files[self._path], self._finder.location(self._path), "exec", dont_inherit=True)
        exec(code, module.__dict__)

    def is_package(self, fullname: str) -> bool:
        return self._is_package

    def get_source(self, fullname: str) -> str:
        return self._finder.files[self._path].decode("utf-8")

    def get_resource_reader(self, fullname: str) -> _Resources | None:
        if not self._is_package:
            return None
        return _Resources(BundlePath(self._finder.files, self._path.rsplit("/", 1)[0]))


class BundleFinder(importlib.abc.MetaPathFinder):
    """Finds ``nobroker`` and its submodules in the blob; everything else is left to the usual finders."""

    def __init__(self, archive: str, files: dict[str, bytes]) -> None:
        self.archive = archive
        self.files = files

    def location(self, path: str) -> str:
        """Where a file of the blob says it is: inside the .pyz, as zipimport would name it."""
        return f"{self.archive}/{path}"

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        base = fullname.replace(".", "/")
        for rel, is_package in ((base + "/__init__.py", True), (base + ".py", False)):
            if rel in self.files:
                loader = BundleLoader(self, rel, is_package)
                spec = importlib.util.spec_from_loader(fullname, loader, origin=self.location(rel), is_package=is_package)
                assert spec is not None
                spec.has_location = True
                if is_package:
                    spec.submodule_search_locations = [self.location(base)]
                return spec
        return None


def install(archive: str, blob: bytes) -> BundleFinder:
    """Serve ``nobroker`` from ``blob`` (the bytes of nobroker.bundle inside ``archive``) from now on."""
    finder = BundleFinder(archive, unpack(blob))
    sys.meta_path.insert(0, finder)
    return finder
