"""A git revision of a repository as a source of outcomes: a DVC experiment's name (a ref
under `refs/exps/`, `dvc exp show` names it) or anything `git rev-parse` takes, and the files
of its commit, read with `git show <sha>:<path>` without checking anything out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from bertcore.common.errors import BertError

EXPERIMENT_REFS = "refs/exps"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BertError(f"git {args[0]} failed in {repo}: {exc}") from None


def experiment_commit(repo: Path, name: str) -> str | None:
    """The commit of DVC experiment `name` (refs/exps/<baseline>/<name>); the one on the
    checked-out commit's baseline when several baselines have one of that name. None: no
    experiment of that name."""
    proc = _git(repo, "for-each-ref", "--format=%(refname) %(objectname)", EXPERIMENT_REFS)
    found = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        ref, _, sha = line.partition(" ")
        parts = ref.split("/")
        if parts[-1] == name and len(parts) == 5:  # refs/exps/ab/cdef.../name
            found[parts[2] + parts[3]] = sha
    if len(found) <= 1:
        return next(iter(found.values()), None)
    head = commit_of(repo, "HEAD")
    if head in found:
        return found[head]
    raise BertError(f"DVC experiment {name} exists on {len(found)} baselines "
                    f"({', '.join(sorted(b[:7] for b in found))}): name its commit instead")


def commit_of(repo: Path, revision: str) -> str | None:
    """The commit `revision` names in `repo`; None when it names none (or no git repo)."""
    if revision.startswith("-"):
        return None
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    return proc.stdout.strip() if proc.returncode == 0 else None


def files_at(repo: Path, commit: str, folder: str, suffix: str) -> list[str]:
    """The paths under `folder` at `commit` whose name ends with `suffix`, in name order."""
    proc = _git(repo, "ls-tree", "--name-only", f"{commit}:{folder}")
    if proc.returncode != 0:
        return []
    return [f"{folder}/{name}" for name in sorted(proc.stdout.splitlines())
            if name.endswith(suffix)]


def file_at(repo: Path, commit: str, path: str) -> str | None:
    """The text of `path` at `commit`; None when the commit has no such file."""
    proc = _git(repo, "show", f"{commit}:{path}")
    return proc.stdout if proc.returncode == 0 else None


def copy_at(repo: Path, commit: str, paths: list[str], dst: str | os.PathLike) -> list[Path]:
    """`paths` at `commit` written into the folder `dst` under their names."""
    copies = []
    for path in paths:
        text = file_at(repo, commit, path)
        if text is not None:
            copies.append(Path(dst) / Path(path).name)
            copies[-1].write_text(text, encoding="utf-8")
    return copies
