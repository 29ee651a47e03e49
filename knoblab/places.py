"""Where knoblab writes — its home, report folders, JSON files — checked once, before anything
starts, so that an unusable place is one line naming it instead of a failure after an hour of
measuring."""

from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from collections.abc import Collection
from pathlib import Path

from knoblab.errors import UserError

# The server's own scripts (mariadb-install-db is a shell script) and its option files do not
# survive these in a path: a space splits it, a '#' starts a comment, quotes and '$' are
# interpreted. Every server path lies under the home, so the home is where they are refused.
_UNSAFE_IN_SERVER_PATHS = re.compile(r"[\s#'\"\\`$;&|<>*?\[\]{}()!]")
# Less than this free in the home and nothing useful can run: a template alone is more.
_MIN_FREE = 64 * 1024 * 1024
# A folder knoblab wrote holds this file; one that does not, and holds anything else, is the
# user's and is never written into.
REPORT_MARK = ".knoblab-report"
# What earlier versions wrote into a report folder that no exporter writes now.
_EARLIER_REPORT_FILES = ("knoblab-tuned.cnf",)


def knoblab_home() -> Path:
    """Where templates, sandboxes, replay plans and the default store live ($KNOBLAB_HOME or
    ~/.knoblab)."""
    # Absolute: the server resolves a relative path against its own folder, not ours.
    home = Path(os.environ.get("KNOBLAB_HOME") or Path.home() / ".knoblab").expanduser().absolute()
    home.mkdir(parents=True, exist_ok=True)
    return home


def usable_home(raw: str | None, *, writes: bool) -> Path:
    """$KNOBLAB_HOME (default ~/.knoblab) as an absolute folder that exists; with `writes`,
    one knoblab can start servers in: writable, with room, its path safe for the server."""
    shown = f"KNOBLAB_HOME={raw}" if raw else "the knoblab home"
    home = Path(raw or Path.home() / ".knoblab").expanduser().absolute()
    if bad := _UNSAFE_IN_SERVER_PATHS.search(str(home)):
        raise UserError(f"{shown}: the server's scripts cannot use a path holding "
                        f"{bad.group()!r}; point KNOBLAB_HOME at a folder whose path has no "
                        "spaces, quotes or any of # $ ; & | < > * ? [ ] { } ( ) !")
    if not writes and home.is_dir():
        return home  # a command that only reads the store needs no more (another user's home)
    # A missing parent is more often a typing error than a wish for a new tree of folders.
    _folder(home, shown, "point KNOBLAB_HOME at a folder", create=True, parents=False)
    if writes:
        _writable(home, shown)
        free = shutil.disk_usage(home).free
        if free < _MIN_FREE:
            raise UserError(f"{shown} ({home}): its file system is full ({free // 2**20} MB "
                            "free); free some space or point KNOBLAB_HOME at another disk")
    return home


def output_folder(path: Path, flag: str) -> None:
    """A folder knoblab will create or fill (`--out`): a folder, or a place one can be made."""
    _folder(path, f"{flag} {path}", f"give {flag} a folder")


def output_file(path: Path, flag: str) -> None:
    """A file knoblab will write (`--json`): not a folder; writable where it is, or creatable."""
    shown = f"{flag} {path}"
    if path.is_dir():
        raise UserError(f"{shown} is a folder; give {flag} a file name")
    if path.exists():
        if not os.access(path, os.W_OK) or _read_only_fs(path.parent):
            raise UserError(f"{shown}: the file cannot be written (permission denied); "
                            f"give {flag} another file")
        return
    _folder(path.parent, shown, f"give {flag} a file in a folder that can be written")


def not_knoblabs_own(path: Path, flag: str, own: dict[Path, str], home: Path) -> None:
    """An output is never one of the files knoblab relies on (its store, a study's storage,
    the spec being run) nor inside its home: writing a report there would destroy them."""
    where = path.expanduser().resolve()
    for mine, what in own.items():
        mine = mine.expanduser().resolve()
        if where == mine or (where in mine.parents and flag == "--out"):
            raise UserError(f"{flag} {path} is {what}: writing there would destroy it; give "
                            f"{flag} another place")
    if where == home.resolve() or home.resolve() in where.parents:
        raise UserError(f"{flag} {path} lies in knoblab's home ({home}), which holds its "
                        f"servers and results; give {flag} a place outside it")


def check_report_folder(folder: Path, report_files: Collection[str]) -> None:
    """Refuse, without writing anything, a folder a report may not be written into.
    `report_files`: what a report writes (knoblab.report.exporters); a folder holding only
    these and charts is knoblab's, even from a version that wrote no mark."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file, not a folder: give another --out")
    if folder.is_dir() and not (folder / REPORT_MARK).exists():
        ours = {*report_files, *_EARLIER_REPORT_FILES}
        foreign = sorted(p.name for p in folder.iterdir()
                         if p.name not in ours and p.suffix != ".png")
        if foreign:
            shown = ", ".join(foreign[:3]) + (", …" if len(foreign) > 3 else "")
            raise UserError(f"{folder} holds files knoblab did not write ({shown}); give an "
                            "empty or new folder with --out")


def write_file(path: Path, text: str, flag: str) -> None:
    """Write an output file, naming it (not the report folder) when it fails."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise UserError(f"cannot write {flag} {path}: {exc.strerror or exc}") from None


def data_folder(path: Path, shown: str) -> None:
    """A folder sandboxes keep their data in ([machine] datadir): it exists, its path is safe
    for the server, and it can be written (tried: a read-only or full file system is said)."""
    if bad := _UNSAFE_IN_SERVER_PATHS.search(str(path)):
        raise UserError(f"{shown} = {str(path)!r}: the server cannot use a path holding "
                        f"{bad.group()!r}; choose a folder whose path has no spaces, quotes or "
                        "any of # $ ; & | < > * ? [ ] { } ( ) !")
    if not path.is_dir():
        raise UserError(f"{shown} = {str(path)!r}: no such folder; create it on the file "
                        "system to test, or fix the path")
    _writable(path, f"{shown} = {str(path)!r}")
    free = shutil.disk_usage(path).free
    if free < _MIN_FREE:
        raise UserError(f"{shown} = {str(path)!r}: its file system is full ({free // 2**20} MB "
                        "free); free some space or choose another folder")


def _folder(path: Path, shown: str, fix: str, *, create: bool = False,
            parents: bool = True) -> None:
    """`path` is a folder or can be made one (with its missing parents, when `parents`);
    made now when `create`."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{shown} is a file, not a folder; {fix}")
    existing = path
    while not existing.exists():
        if existing.is_symlink():
            raise UserError(f"{shown}: {existing} is a broken symbolic link; {fix}")
        existing = existing.parent
    if not existing.is_dir():
        raise UserError(f"{shown}: {existing} is a file, so no folder can be made below it; "
                        f"{fix}")
    if not parents and existing not in (path, path.parent):
        raise UserError(f"{shown}: its parent folder {path.parent} does not exist; create it "
                        f"first, or {fix} that exists")
    _writable(existing, shown)
    if create:
        try:
            path.mkdir(exist_ok=True)
        except OSError as exc:
            raise UserError(f"{shown}: cannot create it ({exc.strerror}); {fix}") from None


def _writable(folder: Path, shown: str) -> None:
    """Tried, not asked: os.access says yes to root on a read-only file system."""
    try:
        with tempfile.TemporaryFile(dir=folder) as probe:
            probe.write(b"knoblab")
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        why = {errno.ENOSPC: "its file system is full", errno.EDQUOT: "the disk quota is used up",
               errno.EROFS: "its file system is read-only",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied"}.get(
            exc.errno or 0, exc.strerror or str(exc))
        raise UserError(f"{shown}: cannot write in {folder} ({why}); free it, fix its "
                        "permissions, or choose another place") from None


def _read_only_fs(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False
