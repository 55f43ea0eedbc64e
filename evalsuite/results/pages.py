"""A results page and what it records of its data archive.

docs/results/NAME.md is the page; docs/results/NAME/ holds its Markdown sub-pages and small JSON
summaries (tracked) and, once fetched, its data (ignored by git). NAME/archive.json records the
archive the data comes in: its file name and version, its sha256 (checked before it is opened), the
sha256 of the tar inside (what `pack` rebuilds bit for bit from the same files, whatever the zlib)
and the commit whose tree holds those files (what a clone rebuilds the archive from).
`.fetched.json` beside the data says which archive was unpacked there. Both are read as data
(evalsuite.core.files): a record that names a file outside the page, or says more than an archive may
hold, is refused in one line, never acted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalsuite.core.errors import ConfigError
from evalsuite.core.files import parse_json, read_regular, shown
from evalsuite.core.rundir import is_safe_name

RESULTS_DIR = Path("docs") / "results"  # where a clone keeps its pages, from its root
MANIFEST, MARKER = "archive.json", ".fetched.json"
ARCHIVE_SUFFIX = ".tar.gz"
SHA256 = r"^[0-9a-f]{64}$"
COMMIT = r"^[0-9a-f]{40}([0-9a-f]{24})?$"  # git's SHA-1 or SHA-256 object id
# What one page's archive may be: a download stops at its recorded size, an unpack at its recorded
# files and bytes, and a record claiming more than these is refused before anything is fetched.
MAX_ARCHIVE_BYTES = 4 << 30
MAX_UNPACKED_BYTES = 16 << 30
MAX_FILES = 100_000
RECORD_BYTES = 16 << 20  # archive.json, .fetched.json: a few kB (a file list)
PATH_RULE = "a path inside the page's folder: NAME/NAME/..., each part letters, digits, '_', '.', '-'"


def is_inner_path(rel: object) -> bool:
    """A relative POSIX path of plain names (no '', '.', '..', no leading '/' or '.')."""
    return isinstance(rel, str) and all(is_safe_name(part) for part in rel.split("/"))


def _inner_paths(values: list[str]) -> list[str]:
    bad = next((v for v in values if not is_inner_path(v)), None)
    if bad is not None:
        raise ValueError(f"{shown(bad)} is not {PATH_RULE}")
    return values


class Archive(BaseModel):
    """NAME/archive.json, written by `evalsuite results pack`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: int = 1
    page: str
    version: int = Field(ge=1, le=1_000_000)
    file: str
    sha256: str = Field(pattern=SHA256)
    bytes: int = Field(ge=0, le=MAX_ARCHIVE_BYTES)
    tar_sha256: str = Field(pattern=SHA256)
    files: int = Field(ge=1, le=MAX_FILES)
    unpacked_bytes: int = Field(ge=0, le=MAX_UNPACKED_BYTES)
    # files of the page's folder kept in git beside its Markdown (never in the archive)
    summaries: list[str] = Field(default_factory=list, max_length=MAX_FILES)
    # the commit whose tree holds the data files in the page's folder: `fetch`'s default source
    commit: str | None = Field(None, pattern=COMMIT)

    @field_validator("summaries")
    @classmethod
    def _summaries_inside(cls, value: list[str]) -> list[str]:
        return _inner_paths(value)

    @model_validator(mode="after")
    def _file_is_the_pages(self):
        # the name `pack` gives it: a record can never name another file (/etc/passwd) to read and hash
        if not is_safe_name(self.page) or self.file != f"{self.page}-v{self.version}{ARCHIVE_SUFFIX}":
            raise ValueError(f"file {shown(self.file)} is not this page's archive (allowed: "
                             f"PAGE-vVERSION{ARCHIVE_SUFFIX}, as `evalsuite results pack` names it)")
        return self


class Fetched(BaseModel):
    """NAME/.fetched.json, written by `evalsuite results fetch`: the archive unpacked there, and its files
    (those a later fetch removes where the new archive lacks them)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    file: str
    sha256: str = Field(pattern=SHA256)
    files: list[str] = Field(max_length=MAX_FILES)

    @field_validator("files")
    @classmethod
    def _files_inside(cls, value: list[str]) -> list[str]:
        return _inner_paths(value)


R = TypeVar("R", bound=BaseModel)


def read_record(path: Path, model: type[R], what: str) -> R:
    """A page's JSON record (archive.json, .fetched.json) as data: a regular file, each key once, its
    schema's types; else one line naming the file and the key."""
    raw = read_regular(path, RECORD_BYTES, what)
    parse_json(path, raw, what)
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        err = e.errors(include_url=False, include_input=False)[0]
        key = "".join(f"{p}: " for p in [".".join(map(str, err["loc"]))] if p)
        raise ConfigError(f"{path}: not {what}: {key}{err['msg'].removeprefix('Value error, ')}") from None


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
        if not path.exists() and not path.is_symlink():
            return None
        archive = read_record(path, Archive, "an archive record")
        if archive.page != self.name:
            raise ConfigError(f"{path}: not an archive record of this page: page: {shown(archive.page)} (allowed: "
                              f"{self.name!r})")
        return archive

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
    head, _, rel = name.partition("/")
    if head != page.name or not is_inner_path(rel):
        raise ConfigError(f"archive member {shown(name)}: not a file of {page.name}/ (allowed: {page.name}/PATH, "
                          f"each part letters, digits, '_', '.', '-')")
    if rel == MARKER or page.is_summary(rel, summaries):
        raise ConfigError(f"archive member {shown(name)}: a file the page keeps in git, never in its archive")
    return rel


def fetched(page: Page, data: Path | None = None) -> Fetched | None:
    """What `fetch` unpacked in `data` (the page's folder): the archive's file, sha256 and files; None
    where nothing was."""
    path = (page.folder if data is None else data) / MARKER
    if not path.exists() and not path.is_symlink():
        return None
    return read_record(path, Fetched, "a fetch record")


def page_data(ref: str | Path, root: Path | None = None) -> Path:
    """The folder holding a page's data, once `evalsuite results fetch` has unpacked the archive the
    page records there: docs/results/NAME/ (or NAME/ beside the page under `root`)."""
    page = find_page(ref, root)
    archive = page.archive()
    if archive is None:
        raise ConfigError(f"{page.markdown}: records no data archive ({page.manifest_path} missing)")
    got = fetched(page)
    if got is None or got.sha256 != archive.sha256:
        was = f" (it holds {shown(got.file)}, the page records {archive.file})" if got else ""
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
