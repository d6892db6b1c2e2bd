"""The output directory of a corpus tool: refused when it holds something, unless --overwrite empties it."""

from __future__ import annotations

import posixpath

from plumbing import fs


def prepare_output_dir(path: str, *, overwrite: bool, marker: str, flag: str = "--output") -> None:
    """Makes `path` an empty directory (local or gs://) for a new output whose completion marker is `marker`.

    With overwrite, a non-empty directory is emptied (but for this command's lease), its marker first, so that a crash midway never
    leaves a directory that looks complete.

    Raises:
      OutputError: path is a file, or a non-empty directory without overwrite.
    """
    if fs.check_output_dir(path, overwrite=overwrite, flag=flag):
        filesystem, _ = fs.filesystem(path)
        marker_path = fs.join(path, marker)
        if fs.exists(marker_path):
            filesystem.rm(fs.filesystem(marker_path)[1])
        for entry in fs.listdir(path):
            if fs.is_lease_name(posixpath.basename(entry.rstrip("/"))):
                continue  # this command's own lease on the output
            filesystem.rm(fs.filesystem(entry)[1], recursive=True)
    fs.makedirs(path)
