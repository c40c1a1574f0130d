"""Durable writing of epochtrain's files (checkpoints, buffers, datasets, logs, videos).

Writing goes through :func:`write_durably`: a failure (a full disk, a size limit) becomes
a :class:`~epochtrain.errors.CheckpointError` naming the file, and the partial file is
removed. :func:`replace_file` writes a whole file or nothing (a temporary file beside it,
fsynced, renamed over it; what a killed writer left is removed by the next write): every
file epochtrain writes outside a checkpoint directory goes through it, and
:func:`replace_files` publishes a set of files that belong together as one.
:func:`deferred_signals` holds Ctrl-C and SIGTERM over steps that must not be cut apart,
and :func:`removing_new_folders` removes the folders a failed write created.
"""

from __future__ import annotations

import glob
import os
import secrets
import signal
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, Literal

from epochtrain.errors import CheckpointError

__all__ = [
    "NAME_MAX",
    "check_writable_dir",
    "deferred_signals",
    "fsync_dir",
    "pid_alive",
    "removing_new_folders",
    "replace_file",
    "replace_files",
    "replacing",
    "write_durably",
]


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


NAME_MAX = 255
"""Bytes a file or directory name may have on the usual file systems (ext4, XFS, APFS)."""


def check_writable_dir(path: str | os.PathLike[str], what: str) -> None:
    """``ValueError`` naming ``what`` unless ``path`` is a directory this process can write
    in, or one it can create (its nearest existing ancestor is a writable directory);
    leaves nothing behind, so a run refused later leaves no empty directory. Writable
    means a file can be created there (an unnamed one, gone at once): ``os.access`` alone
    says yes for ``/proc`` and for directories whose file system refuses new files."""
    target = Path(path).absolute()
    too_long = next((p for p in target.parts if len(os.fsencode(p)) > NAME_MAX), None)
    if too_long is not None:
        raise ValueError(
            f"{what} {os.fspath(path)[:60]!r}...: the name {too_long[:40]!r}... is "
            f"{len(os.fsencode(too_long))} bytes, more than a file name may have "
            f"({NAME_MAX}): choose a shorter one"
        )
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
