"""A results page and what it records of its data archive.

docs/results/NAME.md is the page; docs/results/NAME/ holds its Markdown sub-pages and small JSON
summaries (tracked) and, once fetched, its data (ignored by git). NAME/archive.json records the
archive the data comes in: its file name and version, its sha256 (checked before it is opened), the
sha256 of the tar inside (what `pack` rebuilds bit for bit from the same files, whatever the zlib)
and the commit whose tree holds those files (what a clone rebuilds the archive from).
`.fetched.json` beside the data says which archive was unpacked there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalsuite.core.errors import ConfigError
from evalsuite.core.records import is_safe_name

RESULTS_DIR = Path("docs") / "results"  # where a clone keeps its pages, from its root
MANIFEST, MARKER = "archive.json", ".fetched.json"
ARCHIVE_SUFFIX = ".tar.gz"
SHA256 = r"^[0-9a-f]{64}$"
COMMIT = r"^[0-9a-f]{40}([0-9a-f]{24})?$"  # git's SHA-1 or SHA-256 object id


class Archive(BaseModel):
    """NAME/archive.json, written by `evalsuite results pack`."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    page: str
    version: int = Field(ge=1)
    file: str
    sha256: str = Field(pattern=SHA256)
    bytes: int = Field(ge=0)
    tar_sha256: str = Field(pattern=SHA256)
    files: int = Field(ge=1)
    unpacked_bytes: int = Field(ge=0)
    # files of the page's folder kept in git beside its Markdown (never in the archive)
    summaries: list[str] = Field(default_factory=list)
    # the commit whose tree holds the data files in the page's folder: `fetch`'s default source
    commit: str | None = Field(None, pattern=COMMIT)


@dataclass(frozen=True)
class Page:
    name: str
    markdown: Path

    @property
    def folder(self) -> Path:
        return self.markdown.with_suffix("")

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    def archive(self) -> Archive | None:
        """The archive the page records; None for a page without data beyond its summaries."""
        path = self.manifest_path
        if not path.is_file():
            return None
        try:
            return Archive.model_validate_json(path.read_bytes())
        except ValidationError as e:
            err = e.errors()[0]
            raise ConfigError(f"{path}: not an archive record: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None

    def is_summary(self, rel: str, summaries: Sequence[str] = ()) -> bool:
        """Kept in git, never archived: Markdown, the archive record, and the summaries it names."""
        return rel.endswith(".md") or rel == MANIFEST or rel in summaries

    def in_archive(self, rel: str, summaries: Sequence[str] = ()) -> bool:
        """Whether a file of the page's folder belongs in its archive (by its POSIX path inside it)."""
        return not (rel == MARKER or rel.startswith(".fetch-") or self.is_summary(rel, summaries))

    def data_files(self, summaries: Sequence[str] = ()) -> list[str]:
        """The page folder's files that belong in its archive, as sorted POSIX paths inside the folder."""
        if not self.folder.is_dir():
            return []
        out = []
        for p in self.folder.rglob("*"):
            rel = p.relative_to(self.folder).as_posix()
            if p.is_dir() or not self.in_archive(rel, summaries):
                continue
            if p.is_symlink() or not p.is_file():
                raise ConfigError(f"{p}: not a plain file; an archive holds plain files only")
            out.append(rel)
        return sorted(out)


def pages(root: Path | None = None) -> list[Page]:
    root = RESULTS_DIR if root is None else root
    return [Page(p.stem, p) for p in sorted(root.glob("*.md")) if p.stem != "README"]


def find_page(ref: str | Path, root: Path | None = None) -> Page:
    """A page named by its Markdown file, its folder, or its name under `root` (docs/results)."""
    p = Path(ref)
    if p.suffix == ".md":
        markdown = p
    elif p.is_dir() and p.with_suffix(".md").is_file():
        markdown = p.with_suffix(".md")
    elif is_safe_name(str(ref)) and "/" not in str(ref):
        markdown = (RESULTS_DIR if root is None else root) / f"{ref}.md"
    else:
        markdown = p
    if not markdown.is_file():
        known = ", ".join(pg.name for pg in pages(root)) or "none"
        raise ConfigError(f"{ref}: no results page there (allowed: a page's .md file, its folder, or the name of "
                          f"one in {RESULTS_DIR if root is None else root}: {known})")
    return Page(markdown.stem, markdown)


def member_path(page: Page, name: str, summaries: Sequence[str]) -> str:
    """The path inside the page folder that an archive member `NAME/...` is unpacked to; a name
    outside it, or one the page keeps in git, is refused."""
    pure = PurePosixPath(name)
    parts = pure.parts
    if (pure.is_absolute() or len(parts) < 2 or parts[0] != page.name or any(x in ("", ".", "..") for x in parts)
            or "\\" in name or not all(is_safe_name(x) for x in parts[1:])):
        raise ConfigError(f"archive member {name!r}: not a file of {page.name}/ (allowed: {page.name}/PATH, "
                          f"each part letters, digits, '_', '.', '-')")
    rel = "/".join(parts[1:])
    if rel == MARKER or page.is_summary(rel, summaries):
        raise ConfigError(f"archive member {name!r}: a file the page keeps in git, never in its archive")
    return rel


def fetched(page: Page, data: Path | None = None) -> dict | None:
    """What `fetch` unpacked in `data` (the page's folder): the archive's file, sha256 and files."""
    path = (page.folder if data is None else data) / MARKER
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def page_data(ref: str | Path, root: Path | None = None) -> Path:
    """The folder holding a page's data, once `evalsuite results fetch` has unpacked the archive the
    page records there: docs/results/NAME/ (or NAME/ beside the page under `root`)."""
    page = find_page(ref, root)
    archive = page.archive()
    if archive is None:
        raise ConfigError(f"{page.markdown}: records no data archive ({page.manifest_path} missing)")
    got = fetched(page)
    if got is None or got.get("sha256") != archive.sha256:
        was = f" (it holds {got.get('file')}, the page records {archive.file})" if got else ""
        raise ConfigError(f"{page.folder}: the page's data is not there{was}; run `evalsuite results fetch "
                          f"{page.markdown}`")
    return page.folder


def kept_scores(ref: str | Path, part: str = "scores", variants: Sequence[str] = (),
                root: Path | None = None) -> dict[str, dict[str, dict[str, dict]]]:
    """variant -> task -> sample id -> Score row, of the kept scores in a page's data folder `part`
    (`scores`, `scores-128k`, `latency`, ...): the one reader benches and tests use."""
    from evalsuite.results.scores import read_kept

    if PurePosixPath(part).is_absolute() or ".." in PurePosixPath(part).parts:
        raise ConfigError(f"part {part!r}: a folder inside the page's data (e.g. scores)")
    return read_kept(page_data(ref, root) / part, variants)
