"""Published results and the data behind them.

A run folder holds prompts and completions (hundreds of MB on long contexts); what a comparison
needs of it is each item's Score. `scores` keeps those per variant and task (`evalsuite export
RUN --scores DIR`) and turns them back into a run folder that gate, compare, report and check read
(`evalsuite import`), or one that `run --resume` completes. A results page (docs/results/PAGE.md)
keeps its Markdown and small JSON summaries in the tree; its per-item scores, run folders and plots
are one versioned archive per page (`archive`: packed reproducibly, `tarball`), whose files a commit
of the repository's history holds: `fetch` rebuilds it from there (`history`) or takes it from a
mirror (`sources`), its sha256 checked against the page's `archive.json`.

`kept_scores(PAGE, PART)` is the one reader of a page's kept scores for benches and tests, wherever
`evalsuite results fetch` put them.

May import: core, stats, tasks, run.
"""

from evalsuite.results.pages import kept_scores, page_data

__all__ = ["kept_scores", "page_data"]
