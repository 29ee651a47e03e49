"""A sandbox's own copy of a data directory: copied as InnoDB would have made it, and taken
out of the page cache where a measurement must read it from the disk."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from knoblab.observe import drop_from_page_cache


def copy_datadir(source: Path, target: Path) -> None:
    # Not shutil.copytree: it gathers the errors of its copies into one shutil.Error of
    # texts, whose errno is gone, and a disk filling up mid-copy must be said as one (NoSpace)
    # rather than crash.
    def fail(exc: OSError) -> None:  # a source gone or unreadable is said, not skipped
        raise exc

    target.mkdir(parents=True)
    for folder, _, files in os.walk(source, onerror=fail):
        here = target / Path(folder).relative_to(source)
        here.mkdir(exist_ok=True)
        shutil.copymode(folder, here)  # the datadir's folders stay private (0700)
        for name in files:
            copy_allocating_zeros(Path(folder) / name, here / name)
    # A buffer-pool dump would make every start warm whatever the cache mode asks for.
    (target / "ib_buffer_pool").unlink(missing_ok=True)


_BLOCK = 1 << 16
_ZEROS = bytes(_BLOCK)


def copy_allocating_zeros(source: Path, target: Path) -> None:
    """A copy of `source` whose blocks of zeros are allocated rather than written, as InnoDB
    allocates the files it makes (fallocate: the blocks are the file's, and read as zeros).
    A datadir is mostly zeros: of a fresh one's 110 MB, the 96 MB redo log holds 44 KB of
    records, and a table's file its free pages. Writing them all made every sandbox's start
    write 100 MB to the disk."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        if size:
            # Where the file system cannot allocate, glibc writes the zeros itself.
            os.posix_fallocate(dst.fileno(), 0, size)
        offset = 0
        while block := src.read(_BLOCK):
            if block != _ZEROS[:len(block)]:
                os.pwrite(dst.fileno(), block, offset)
            offset += len(block)


def uncache(folder: Path) -> None:
    """Every file under `folder` written to disk and dropped from the page cache, so that
    whoever reads it next reads it from the disk (and its cache is charged to them)."""
    drop_from_page_cache(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
