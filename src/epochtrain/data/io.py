"""Safe reading and durable writing of epochtrain's files (checkpoints, buffers, datasets).

Reading never runs code from the file: :func:`safe_torch_load` uses
``torch.load(weights_only=True)`` with only epochtrain's own stats types and numpy arrays
allow-listed, and :func:`safe_unpickle` (the pickled env snapshots inside a checkpoint)
resolves only classes from gymnasium, numpy, epochtrain and the modules the caller's live
env is built from. A file that needs anything else is refused with a
:class:`~epochtrain.errors.CheckpointError` saying so. Writing goes through
:func:`write_durably`: a failure (a full disk, a size limit) becomes a ``CheckpointError``
naming the file, and the partial file is removed. :func:`replace_file` writes a whole file
or nothing (a temporary file beside it, fsynced, renamed over it; what a killed writer left
is removed by the next write): every file epochtrain writes outside a checkpoint directory
goes through it.
"""

from __future__ import annotations

import builtins
import glob
import io
import os
import pickle
import secrets
import signal
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np
import torch

from epochtrain.errors import CheckpointError

__all__ = [
    "check_writable_dir",
    "deferred_signals",
    "fsync_dir",
    "pid_alive",
    "removing_new_folders",
    "replace_file",
    "replace_files",
    "replacing",
    "safe_globals",
    "safe_torch_load",
    "safe_unpickle",
    "write_durably",
]


def safe_globals() -> list[Any]:
    """The non-tensor types epochtrain's files may hold, allow-listed for ``weights_only``."""
    from epochtrain import stats

    numpy_types: list[Any] = [np.ndarray, np.dtype]
    numpy_types += [type(np.dtype(t)) for t in np.sctypeDict.values()]
    core = getattr(np, "_core", None) or np.core
    numpy_types += [core.multiarray._reconstruct, core.multiarray.scalar]
    stats_types = [
        getattr(stats, name)
        for name in dir(stats)
        if isinstance(getattr(stats, name), type)
        and getattr(stats, name).__module__ == stats.__name__
    ]
    return numpy_types + stats_types


def safe_torch_load(path: str | os.PathLike[str], what: str) -> Any:
    """``torch.load(path, weights_only=True)`` with epochtrain's own types allow-listed.

    ``what`` names the file's role in messages (``"checkpoint file"``, ``"buffer file"``).
    Raises :class:`CheckpointError` naming the file when it is unreadable, not a torch
    file, or would need arbitrary code (a global outside the allow-list) to load.
    """
    file = os.fspath(path)
    try:
        with torch.serialization.safe_globals(safe_globals()):
            return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()
        detail = next((line for line in first if "GLOBAL" in line or "Unsupported" in line), "")
        raise CheckpointError(
            f"{what} {file!r} is refused: loading it would need more than tensors, numpy "
            f"arrays and epochtrain's own types ({detail.strip() or exc}); it may run code. "
            "Load only files written by epochtrain; if you trust this one, read it with "
            "torch.load(..., weights_only=False) yourself"
        ) from exc
    except FileNotFoundError as exc:
        raise CheckpointError(f"{what} {file!r} does not exist") from exc
    except Exception as exc:
        raise CheckpointError(f"{what} {file!r} cannot be read: {_unreadable(file, exc)}") from exc


def _unreadable(file: str, exc: Exception) -> str:
    """Why ``torch.load`` failed on ``file``, in words (torch says ``KeyError: 174812789``
    for a text file, ``EOFError`` for an empty one)."""
    try:
        with open(file, "rb") as f:
            head = f.read(4)
    except OSError as err:
        return err.strerror or str(err)
    if head != b"PK\x03\x04":  # every file torch.save writes is a zip archive
        return "it is not a file torch.save wrote (empty, torn at the start, or another format)"
    first = str(exc).split(". ")[0]
    return f"it is torn or corrupt ({type(exc).__name__}: {first})"


_SAFE_BUILTINS = frozenset(
    {
        "bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int",
        "list", "object", "range", "set", "slice", "str", "tuple", "type",
    }
)  # fmt: skip
_SAFE_CALLABLES = frozenset(
    {
        ("copyreg", "_reconstructor"),
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
        ("collections", "deque"),
        ("_codecs", "encode"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy.random._pickle", "__bit_generator_ctor"),
        ("numpy.random._pickle", "__generator_ctor"),
        ("numpy.random._pickle", "__randomstate_ctor"),
    }
)
_CLASS_PACKAGES = ("gymnasium", "numpy", "epochtrain")


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, modules: frozenset[str]) -> None:
        super().__init__(io.BytesIO(data))
        self.modules = modules

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _SAFE_BUILTINS:
            return getattr(builtins, name)
        if (module, name) in _SAFE_CALLABLES:
            return super().find_class(module, name)
        if module.startswith("numpy.random") and name.startswith("__pyx_unpickle_"):
            return super().find_class(module, name)  # Cython's rebuild of its own class
        package = module.split(".")[0]
        if package in _CLASS_PACKAGES or module in self.modules:
            found = super().find_class(module, name)
            if isinstance(found, type):  # classes only: no function of any module is called
                return found
        raise pickle.UnpicklingError(f"the global {module}.{name} is not allowed")


def safe_unpickle(data: bytes, *, allowed_modules: Iterable[str], what: str) -> Any:
    """Unpickle ``data`` resolving only safe globals; ``what`` names it in messages.

    Allowed: harmless builtins, numpy arrays and random generators, and *classes* (never
    functions) from gymnasium, numpy, epochtrain and ``allowed_modules`` (the modules of
    the caller's own env classes). Anything else raises :class:`CheckpointError`.
    """
    try:
        return _RestrictedUnpickler(data, frozenset(allowed_modules)).load()
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"{what} is refused: {exc}; unpickling it could run code. Load only "
            "checkpoints written by epochtrain for envs built from the same classes"
        ) from exc
    except Exception as exc:
        raise CheckpointError(f"{what} cannot be read: {exc}") from exc


def fsync_dir(path: Path) -> None:
    """fsync the directory ``path``, so the renames and new files in it survive a power cut."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_FULL_BELOW = 1 << 20
"""Free bytes (for this user) under which a failed write is put down to a full disk."""


def _cause(exc: BaseException, directory: Path) -> str:
    """Why a write into ``directory`` failed, in a few words.

    torch's zip writer reports a full disk as ``RuntimeError: ... unexpected pos ...``;
    with the disk (nearly) full that is what it means, so it is said so.
    """
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    try:
        stat = os.statvfs(directory)
        full = stat.f_bavail * stat.f_frsize < _FULL_BELOW
    except OSError:
        full = False
    return "No space left on device" if full else f"{type(exc).__name__}: {exc}"


def _write_synced(
    path: Path, mode: Literal["wb", "xb"], write: Callable[[BinaryIO], object]
) -> None:
    """Open ``path`` (``"wb"``, or ``"xb"``: a new file), ``write`` into it, flush, fsync."""
    with path.open(mode) as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _cannot_write(what: str, path: Path, cause: str, fix: str) -> str:
    return f"cannot write {what} {os.fspath(path)!r}: {cause}" + (f"; {fix}" if fix else "")


def write_durably(
    path: Path, write: Callable[[BinaryIO], None], *, what: str, fix: str = ""
) -> None:
    """Create ``path``, ``write`` into it, flush and fsync it.

    Any failure (a full disk, a file-size limit, an unpicklable object) removes the
    partial file and raises :class:`CheckpointError` naming ``path``, the cause and
    ``fix``; ``KeyboardInterrupt`` also removes it and propagates unchanged.
    """
    try:
        _write_synced(path, "wb", write)
    except Exception as exc:
        cause = _cause(exc, path.parent)  # before the partial file goes: the disk is full
        path.unlink(missing_ok=True)
        raise CheckpointError(_cannot_write(what, path, cause, fix)) from exc
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def check_writable_dir(path: str | os.PathLike[str], what: str) -> None:
    """``ValueError`` naming ``what`` unless ``path`` is a directory this process can write
    in, or one it can create (its nearest existing ancestor is a writable directory);
    leaves nothing behind, so a run refused later leaves no empty directory. Writable
    means a file can be created there (an unnamed one, gone at once): ``os.access`` alone
    says yes for ``/proc`` and for directories whose file system refuses new files."""
    target = Path(path).absolute()
    found = target
    while not found.exists() and found != found.parent:
        found = found.parent
    if not found.is_dir():
        where = "is a file" if found == target else f"is under {os.fspath(found)!r}, a file"
        raise ValueError(f"{what} {os.fspath(path)!r} {where}: choose a directory")
    if not os.access(found, os.W_OK | os.X_OK):
        raise ValueError(
            f"{what} {os.fspath(path)!r}: {os.fspath(found)!r} is not writable by this user "
            "(or is on a read-only file system): choose a directory you can write in"
        )
    try:
        with tempfile.TemporaryFile(dir=found):
            pass
    except OSError as exc:
        raise ValueError(
            f"{what} {os.fspath(path)!r}: no file can be created in {os.fspath(found)!r} "
            f"({exc.strerror}): choose a directory you can write in"
        ) from None


def pid_alive(pid: int) -> bool:
    """True if a process ``pid`` runs on this host (this process included)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _temporary_beside(path: Path, suffix: str = "") -> Path:
    """A new temporary name beside ``path``, naming this host and process, so that what a
    killed writer leaves can be told from a live writer's file (:func:`_remove_leftovers`)."""
    owner = f"{socket.gethostname()}-{os.getpid()}"
    return path.with_name(f".{path.name}.tmp-{owner}-{secrets.token_hex(4)}{suffix}")


def _remove_leftovers(path: Path) -> None:
    """Remove the temporary files of ``path`` that writers on this host left when they were
    killed (``kill -9`` mid-write leaves a hidden file as large as what was written: a
    buffer file's can be gigabytes). Another host's files are left alone: its processes
    cannot be seen from here."""
    prefix = f".{path.name}.tmp-{socket.gethostname()}-"
    for tmp in path.parent.glob(glob.escape(prefix) + "*"):
        pid = tmp.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)


@contextmanager
def replacing(path: str | os.PathLike[str], *, suffix: str = "") -> Iterator[Path]:
    """A temporary path beside ``path`` for a writer that needs a file name (a video
    encoder): renamed over ``path``, fsynced, when the block ends without error, and
    removed when it does not, so ``path`` is whole or untouched. ``suffix`` ends the
    temporary name (``".mp4"``: writers that pick the format by the extension)."""
    path = Path(path)
    _remove_leftovers(path)
    tmp = _temporary_beside(path, suffix)
    try:
        yield tmp
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def replace_file(
    path: str | os.PathLike[str],
    content: bytes | Callable[[BinaryIO], object],
    *,
    what: str | None = None,
    fix: str = "",
) -> None:
    """Write ``path`` whole or not at all, under any fault.

    ``content`` (bytes, or a function writing into a binary file) fills a new temporary
    file beside ``path`` (created like any file the user writes: its mode follows the
    umask), which is flushed, fsynced and renamed over ``path``; the directory is then
    fsynced. On any failure or interrupt the temporary
    file is removed and an existing ``path`` is untouched. The error propagates as it
    is, or, with ``what`` (e.g. ``"buffer file"``), as a :class:`CheckpointError`
    naming ``path``, the cause and ``fix``.
    """
    path = Path(path)
    _remove_leftovers(path)
    tmp = _temporary_beside(path)
    write = content if callable(content) else (lambda f: f.write(content))
    try:
        _write_synced(tmp, "xb", write)
        os.replace(tmp, path)
    except Exception as exc:
        cause = _cause(exc, path.parent)
        tmp.unlink(missing_ok=True)
        if what is None:
            raise
        raise CheckpointError(_cannot_write(what, path, cause, fix)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


@contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block ends (main thread only; else a no-op).

    Wraps steps that must not be cut between them (the renames that swap a checkpoint or
    publish a dataset, the removal of what an interrupted write made): a signal that
    arrives meanwhile is recorded, and its previous handler runs (raising
    ``KeyboardInterrupt`` for SIGINT) when the block exits.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    held = [s for s in (signal.SIGINT, getattr(signal, "SIGTERM", None)) if s is not None]
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: received.append(signum)) for sig in held
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in received[:1]:
            handler = previous[signal.Signals(signum)]
            if callable(handler):
                handler(signum, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


@contextmanager
def removing_new_folders(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Remove the folders of ``folder``'s path that do not exist yet (those the block
    creates, e.g. a writer's ``mkdir(parents=True)``) if the block ends in an error or
    interrupt and they are still empty; one that another writer filled stays. The removal
    holds SIGINT and SIGTERM (:func:`deferred_signals`): a second Ctrl-C does not cut it."""
    folder = Path(folder).absolute()
    created = [f for f in (folder, *folder.parents) if not f.exists()]  # deepest first
    try:
        yield
    except BaseException:
        with deferred_signals():
            for made in created:
                with suppress(OSError):
                    made.rmdir()
        raise


def replace_files(
    contents: Sequence[tuple[str | os.PathLike[str], bytes | Callable[[BinaryIO], object]]],
    *,
    what: str | None = None,
    fix: str = "",
) -> None:
    """Write several files as one: all the new ones, or (on any failure or interrupt) the
    old ones as they were; :func:`replace_file` for a set of files that belong together,
    such as a dataset and the sidecar that describes it.

    Each ``(path, content)`` fills a temporary file beside its path (fsynced, as in
    :func:`replace_file`). Then, with SIGINT and SIGTERM held (:func:`deferred_signals`),
    the existing files are moved aside, last path first, the new ones renamed into place,
    first path first, their folders fsynced, and the old ones deleted. An error at any of
    these steps but the deletions puts every old file back and removes every new one,
    judged from what is on disk (so a step that raises as it returns is undone too): if
    this function raises, the paths are as they were. Ctrl-C or SIGTERM during the
    renames is held and delivered once they are done: the new files are then in place.
    Order the paths so
    that a later file describes the earlier ones: even a kill (SIGKILL, a power cut) in the
    microseconds of the renames leaves old files, or new ones, or fewer files, never a
    later file of one write beside an earlier file of another; the temporary and
    moved-aside files a killed writer left are removed by the next write of their path.
    Errors propagate as they are, or, with ``what``, as :class:`CheckpointError` naming the
    path written, the cause and ``fix``.
    """
    files = [(Path(path), content) for path, content in contents]
    if not files:
        raise ValueError("contents must hold at least one (path, content) pair")
    new: dict[Path, Path] = {}
    path = files[0][0]
    try:
        for path, content in files:
            _remove_leftovers(path)
            new[path] = _temporary_beside(path)
            write = content if callable(content) else _writer(content)
            _write_synced(new[path], "xb", write)
        with deferred_signals():
            _swap_in(new)
    except Exception as exc:
        cause = _cause(exc, path.parent)
        _remove_all(new.values())
        if what is None:
            raise
        raise CheckpointError(_cannot_write(what, path, cause, fix)) from exc
    except BaseException:
        _remove_all(new.values())
        raise


def _writer(content: bytes) -> Callable[[BinaryIO], object]:
    return lambda f: f.write(content)


def _remove_all(paths: Iterable[Path]) -> None:
    with deferred_signals():
        for path in paths:
            path.unlink(missing_ok=True)


def _swap_in(new: dict[Path, Path]) -> None:
    """Rename each ``new[path]`` over ``path``, all or none (see :func:`replace_files`)."""
    aside = {path: _temporary_beside(path) for path in new}
    try:
        for path in reversed(list(new)):
            if os.path.lexists(path):
                os.rename(path, aside[path])
        for path, tmp in new.items():
            os.rename(tmp, path)
        for folder in dict.fromkeys(path.parent for path in new):
            fsync_dir(folder)  # a write that may not survive a power cut is undone too
    except BaseException:
        for path, tmp in reversed(list(new.items())):
            if not os.path.lexists(tmp) and os.path.lexists(path):
                os.unlink(path)  # the new file, renamed in before the interrupt
            if os.path.lexists(aside[path]):
                os.rename(aside[path], path)
        raise
    with deferred_signals():  # the new files are in place: what is left is tidying
        _remove_all_retrying([old for old in aside.values() if os.path.lexists(old)])


def _remove_all_retrying(paths: Iterable[Path]) -> None:
    """Remove ``paths``; an error on one (an interrupt as the call returns) is retried once
    for every path before it propagates."""
    paths = list(paths)
    try:
        for path in paths:
            path.unlink(missing_ok=True)
    except BaseException:
        for path in paths:
            with suppress(OSError):
                path.unlink(missing_ok=True)
        raise
