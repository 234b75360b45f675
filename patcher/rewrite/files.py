"""Writing generated files: atomically, so a crash never leaves half a file behind.

* Files get the mode any other tool would give them: ``0666 & ~umask`` for a new file, the
  existing mode for a file that is replaced (``tempfile.mkstemp`` alone would give ``0600``).
* :func:`write_pair_atomic` writes several files as a unit: every temporary file is written
  first, then all are renamed, under an exclusive lock on the folder, so parallel writers never
  interleave. (Two renames are not one atomic step: a kill between them is caught by the
  content hash that a manifest records, see ``patcher.rewrite.api``.)
* :func:`write_atomic_with` does the same for a file another program writes (graphviz's
  ``dot -o`` for ``patcher graph``): it writes the temporary file, which is then renamed.
* :func:`stale_files` says which generated files on disk differ from what would be generated
  now: the one freshness check of ``patcher patch --check`` and ``scripts/check_zoo``.
* Temporary files are named ``.<name>.<pid>.<random>.tmp``; a temporary file whose process is
  gone (a killed writer) is removed by the next write to that folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None

_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.[A-Za-z0-9_]+\.tmp$")

#: test hook: ``TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES=SECONDS`` sleeps between the temporary
#: files being written and renamed (so a test can kill a writer at the worst moment).
_PAUSE_ENV = "TRACEZOO_TEST_PAUSE_BETWEEN_RENAMES"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temporaries(folder: str | os.PathLike) -> list[Path]:
    """Remove ``.<name>.<pid>.<x>.tmp`` files in ``folder`` whose writer process is gone."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP.match(entry.name)
        if match and not _pid_alive(int(match.group("pid"))):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def folder_lock(folder: Path):
    """An exclusive ``flock`` on ``folder`` itself (no lock file is left behind)."""
    if fcntl is None:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _new_temporary(path: Path) -> tuple[int, str]:
    """An empty temporary file next to ``path``, with the mode ``path`` has (or would get): its
    descriptor and name."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return fd, temporary


def _pause_before_renames() -> None:
    pause = os.environ.get(_PAUSE_ENV)
    if pause:
        import time

        time.sleep(float(pause))


def _write_temporary(path: Path, text: str) -> str:
    fd, temporary = _new_temporary(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return temporary


def write_pair_atomic(files: Iterable[tuple[str | os.PathLike, str]]) -> None:
    """Write every ``(path, text)`` (all in one folder): temporary files first, then the renames.

    Either all temporary files are written and renamed, or (on an error while writing) none is
    renamed and no temporary file is left.
    """
    files = [(Path(path), text) for path, text in files]
    if not files:
        return
    folder = files[0][0].parent
    folder.mkdir(parents=True, exist_ok=True)
    with folder_lock(folder):
        clean_stale_temporaries(folder)
        temporaries: list[str] = []
        try:
            for path, text in files:
                temporaries.append(_write_temporary(path, text))
            _pause_before_renames()
            for (path, _), temporary in zip(files, temporaries):
                os.replace(temporary, path)
        except BaseException:
            for temporary in temporaries:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            raise


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    write_pair_atomic([(path, text)])


def write_atomic_with(path: str | os.PathLike, fill: Callable[[Path], None]) -> None:
    """Write ``path`` through a temporary file that ``fill(temporary)`` writes (e.g. by running a
    program with ``-o temporary``), then ``os.replace`` it over ``path``.

    The temporary file is in ``path``'s folder, empty and with ``path``'s mode when ``fill`` is
    called; it is removed if ``fill`` raises (or is interrupted), and ``path`` is left as it was.
    ``fill`` runs without the folder lock (a program may take minutes); the rename takes it.
    """
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    with folder_lock(folder):
        clean_stale_temporaries(folder)
        fd, temporary = _new_temporary(path)
    try:
        os.close(fd)
        fill(Path(temporary))
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _pause_before_renames()
        with folder_lock(folder):
            os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


# -- freshness: is what is on disk what would be generated now? ---------------------------------
# One implementation for `patcher patch --check` and `scripts/check_zoo`.


@dataclass(frozen=True)
class StaleFile:
    """A generated file whose committed text differs from what would be generated now."""

    path: Path
    on_disk: str | None  # None: missing
    generated: str

    def diff(self) -> str:
        """A unified diff from the file on disk to the generated text."""
        import difflib

        old = (self.on_disk or "").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, self.generated.splitlines(keepends=True),
                                            fromfile=f"{self.path} (on disk)", tofile=f"{self.path} (generated)"))


def stale_files(generated: Mapping[Path, str]) -> list[StaleFile]:
    """The files of ``generated`` (path -> text it would have now) whose text on disk differs,
    byte for byte (undecodable bytes kept as surrogates, so they differ too)."""
    stale = []
    for path, text in generated.items():
        path = Path(path)
        on_disk = path.read_bytes().decode("utf-8", "surrogateescape") if path.is_file() else None
        if on_disk != text:
            stale.append(StaleFile(path, on_disk, text))
    return stale
