"""MkDocs hook of the docs site (mkdocs.yml): pages may link any file of the repository by its path.

The pages in ``docs/`` link the repository's other files the way GitHub shows them, by a relative
path (``../bench/results/performance.md``, ``../dags_examples/ckpt_daily_events.py``), so the same
link works when the page is read in the repository. MkDocs only knows the files under ``docs/``
and would report those links as broken. This hook adds each linked file outside ``docs/`` to the
site at its repository path (Markdown as a page, anything else as a download; the Markdown files
it adds may link further files, followed the same way), and rewrites the links to the added
copies. A link to a file the repository does not have is left as it is, so ``mkdocs build
--strict`` still fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
# [text](target) and ![alt](target), outside code (fences are skipped line by line below).
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
FENCE = re.compile(r"^\s*(```|~~~)")


def _relative_targets(markdown: str) -> list[str]:
    targets, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            targets += [m.group(2).split("#", 1)[0] for m in LINK.finditer(line)]
    return [t for t in targets if t and "://" not in t and not t.startswith(("/", "mailto:"))]


def _repository_path(page_repo_path: str, target: str) -> str | None:
    """The repository path a relative link of the page at ``page_repo_path`` points at, if inside it."""
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page_repo_path), target))
    return None if resolved.startswith("../") or resolved == ".." else resolved


def _site_path(repo_path: str, docs_dir: str) -> str:
    """Where a repository file lives in the site: ``docs/x`` at ``x``, any other file at its own path."""
    prefix = f"{docs_dir}/"
    return repo_path[len(prefix) :] if repo_path.startswith(prefix) else repo_path


def on_files(files: Files, config: Any) -> Files:
    docs_dir = Path(config["docs_dir"]).resolve().relative_to(ROOT).as_posix()
    pending = [f"{docs_dir}/{f.src_uri}" for f in files if f.src_uri.endswith(".md")]
    folders = {f.src_uri.split("/", 1)[0] for f in files if "/" in f.src_uri}
    seen = set(pending)
    while pending:
        page = pending.pop()
        source = ROOT / page
        for target in _relative_targets(source.read_text(encoding="utf-8")):
            repo_path = _repository_path(page, target)
            if repo_path is None or repo_path in seen or repo_path.startswith(f"{docs_dir}/"):
                continue
            seen.add(repo_path)
            if not (ROOT / repo_path).is_file():
                continue  # a broken link: MkDocs reports it
            if repo_path.split("/", 1)[0] in folders:
                raise ValueError(f"{repo_path}: docs/ has a folder of that name; the site cannot hold both")
            added = File(
                repo_path,
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
            added.inclusion = InclusionLevel.NOT_IN_NAV
            files.append(added)
            if repo_path.endswith(".md"):
                pending.append(repo_path)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    docs_dir = Path(config["docs_dir"]).resolve().relative_to(ROOT).as_posix()
    source = Path(page.file.abs_src_path).resolve().relative_to(ROOT).as_posix()
    here = posixpath.dirname(_site_path(source, docs_dir))

    def rewrite(match: re.Match[str]) -> str:
        target = match.group(2)
        path, _, anchor = target.partition("#")
        if not path or "://" in path or path.startswith(("/", "mailto:")):
            return match.group(0)
        repo_path = _repository_path(source, path)
        outside = repo_path is not None and not repo_path.startswith(f"{docs_dir}/")
        if repo_path is None or (outside and not (ROOT / repo_path).is_file()):
            return match.group(0)  # MkDocs reports it as written
        site_target = posixpath.relpath(_site_path(repo_path, docs_dir), here or ".")
        return f"{match.group(1)}{site_target}{'#' + anchor if anchor else ''}{match.group(3)}"

    lines, fenced = [], False
    for line in markdown.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        lines.append(line if fenced or FENCE.match(line) else LINK.sub(rewrite, line))
    return "\n".join(lines)
