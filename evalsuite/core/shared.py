"""Paths as an artifact meant to be shared shows them (report.md/html, gate.md, JUnit, MLflow tags, the
gate's messages): relative to the run folder, to the repository (the clone that holds the file, or
evalsuite's own package as `evalsuite/...`), else `$EVALSUITE_CACHE/...` or `~/...`, else the file's
name alone; never a path of this machine, which tells a reader elsewhere nothing and names the
machine's folders.
"""

from __future__ import annotations

import re
from pathlib import Path

from evalsuite.core.env import default_cache_dir

PACKAGE = Path(__file__).resolve().parents[1]  # evalsuite/, wherever it is installed
# An absolute path in free text: two or more segments after a slash no word, path or URL character precedes
_ABSOLUTE = re.compile(r"(?<![\w.$~/:+=#?&%-])/[\w.~+@%=-]+(?:/[\w.~+@%=-]+)+/?")


def _repository(path: Path) -> Path | None:
    """The work tree that holds `path` (the folder with .git, as git finds it), if any."""
    for folder in (path, *path.parents):
        if (folder / ".git").exists():
            return folder
    return None


def _roots(p: Path, run_dir: Path | None) -> list[tuple[Path, str]]:
    """(folder, how a path inside it is written), the most specific first."""
    roots = [(run_dir.resolve(), "")] if run_dir is not None else []
    roots.append((PACKAGE, "evalsuite/"))
    roots += [(repo, "") for repo in (_repository(p.parent), _repository(Path.cwd())) if repo is not None]
    return roots + [(default_cache_dir().expanduser().resolve(), "$EVALSUITE_CACHE/"), (Path.home().resolve(), "~/")]


def shared_path(path: str | Path, run_dir: Path | None = None) -> str:
    """`path` as a shared artifact names it: a relative path as it is, an absolute one as the module
    docstring says."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        return str(path)
    p = p.resolve()
    for root, written in _roots(p, run_dir):
        if p != root and p.is_relative_to(root):
            return written + str(p.relative_to(root))
    return p.name


def shared_text(text: str, run_dir: Path | None = None) -> str:
    """Free text (a skip reason, an engine error) with each absolute path in it as shared_path writes it."""
    return _ABSOLUTE.sub(lambda m: shared_path(m.group(0), run_dir), text)


def machine_paths(text: str) -> list[str]:
    """The absolute paths in `text`: what a shared artifact must not hold."""
    return _ABSOLUTE.findall(text)
