"""Haystack text sources and token-level context building for long-context tasks.

Contexts are built in the token ids of the model under test, not in text: a prompt made of
ids has exactly the length that was computed (re-tokenizing decoded text drifts at the
joins), and every sample cut from the same seed's token stream shares a token prefix with
the others, which the engine's prefix cache can reuse.
"""

from __future__ import annotations

import random
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from evalsuite.core.errors import ConfigError

BUILTIN_SOURCES = ("paul_graham", "licensedcode")
_MARK = "\ue000HAYSTACK\ue000"  # private-use code points: no real text or template contains them
_SENTENCE_END = (".", "!", "?", "\n", '."', ".)")
_SPACE_MARKS = (" ", "\u0120", "\u2581", "\u010a", "\n", "\t")  # space, GPT-2 'Ġ', SentencePiece '▁', GPT-2 'Ċ'


@dataclass(frozen=True)
class Document:
    name: str
    text: str
    meta: dict[str, str] = field(default_factory=dict)


def resolve_source(spec: str, base_dir: Path, cache_dir: Path) -> Path:
    """`paul_graham`, `licensedcode` (extracted from their PyPI wheels) or a folder path."""
    if spec == "paul_graham":
        from evalsuite.data.assets import paul_graham_dir

        return Path(paul_graham_dir(cache_dir))
    if spec == "licensedcode":
        from evalsuite.data.assets import licensedcode_dir

        return _licenses_folder(Path(licensedcode_dir(cache_dir)))
    p = Path(spec).expanduser()
    p = p if p.is_absolute() else Path(base_dir) / p
    if not p.is_dir():
        raise ConfigError(f"haystack: {spec!r} is neither {' nor '.join(BUILTIN_SOURCES)} nor a folder ({p} not found)")
    return p


def _licenses_folder(root: Path) -> Path:
    # The wheel also holds ~35K short rule snippets; only the full license texts are prose.
    for cand in (root / "licensedcode" / "data" / "licenses", root / "data" / "licenses", root / "licenses", root):
        if cand.is_dir() and next(cand.glob("*.LICENSE"), None) is not None:
            return cand
    return root


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """licensedcode files start with a YAML block between `---` lines; the prose follows it.

    Only top-level scalar keys are read, by pattern: a YAML parser takes ~20 s for the 2,300
    files, and the keys used here (language, is_generic, ...) are plain scalars.
    """
    m = re.match(r"---\r?\n(.*?)\r?\n---\r?\n", text, re.S)
    if not m:
        return {}, text
    meta = {k: v.strip().strip("'\"") for k, v in re.findall(r"^([A-Za-z_]+):[ \t]*(\S.*)$", m.group(1), re.M)}
    return meta, text[m.end():]


def load_documents(folder: Path, min_chars: int = 200) -> list[Document]:
    """Every .txt (and licensedcode .LICENSE) file under `folder`, sorted by path."""
    folder = Path(folder)
    files = sorted([*folder.rglob("*.txt"), *folder.rglob("*.LICENSE")])
    docs = []
    for f in files:
        meta, text = split_front_matter(f.read_text(encoding="utf-8", errors="replace"))
        text = text.strip()
        if len(text) >= min_chars:
            docs.append(Document(name=str(f.relative_to(folder)), text=text, meta=meta))
    if not docs:
        raise ConfigError(f"haystack: no .txt files of at least {min_chars} characters in {folder}")
    return docs


def english_prose(doc: Document) -> bool:
    """licensedcode labels some texts by language or as placeholders; keep English full texts."""
    m = doc.meta
    flags = [m.get(k, "no").lower() in ("yes", "true") for k in ("is_generic", "is_unknown")]
    return m.get("language", "en") == "en" and not any(flags)


class TokenHaystack:
    """One seed's haystack: the documents in a seeded order, tokenized once, as one id stream.

    Every context of this seed is `ids[:n]`, so a shorter context is a prefix of a longer one.
    """

    def __init__(self, docs: list[Document], tokenizer, seed: int, min_tokens: int,
                 heading: str | None = None, separator: str = "\n\n"):
        order = list(range(len(docs)))
        random.Random(f"haystack:{seed}").shuffle(order)
        ids: list[int] = []
        for k, i in enumerate(order):
            text = docs[i].text + separator
            if heading:
                text = heading.format(n=k + 1) + "\n\n" + text
            ids += encode(tokenizer, text)
            if len(ids) >= min_tokens:
                break
        if len(ids) < min_tokens:
            raise ConfigError(f"haystack: the source has only {len(ids)} tokens with this tokenizer, "
                              f"{min_tokens} are needed; use shorter lengths or a larger folder")
        self.ids = ids
        self.boundaries = _boundaries(ids, tokenizer)

    def position(self, n: int, depth: float) -> int:
        """Where to insert at `depth` (0..1) of a context of `n` tokens: the last sentence end
        at or before depth*n, so nothing lands inside a word; depth 1 is the very end."""
        if depth >= 1:
            return n
        i = bisect_right(self.boundaries, round(depth * n)) - 1
        return self.boundaries[i] if i >= 0 else 0


def encode(tokenizer, text: str) -> list[int]:
    # verbose=False: long haystack documents exceed model_max_length, which is only a warning here
    return list(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])


def _boundaries(ids: list[int], tokenizer) -> list[int]:
    """Positions p (0 included) such that token p-1 ends a sentence or a line and token p
    starts with white space, so an inserted sentence reads "... end. Inserted. Next ..."."""
    uniq = set(ids)
    ends = {t for t in uniq if tokenizer.decode([t]).rstrip(" ").endswith(_SENTENCE_END)}
    # raw token strings keep the leading-space marker that decode() of one token may drop
    raw = dict(zip(uniq, tokenizer.convert_ids_to_tokens(list(uniq))))
    spaced = {t for t in uniq if str(raw[t]).startswith(_SPACE_MARKS)}
    out = [0] + [p + 1 for p, t in enumerate(ids[:-1]) if t in ends and ids[p + 1] in spaced]
    if len(out) * 1000 < len(ids):  # a tokenizer without such markers: sentence ends alone
        out = [0] + [p + 1 for p, t in enumerate(ids) if t in ends]
    return out


def splice(ids: list[int], inserts: list[tuple[int, list[int]]]) -> list[int]:
    """`ids` with each (position, tokens) inserted; equal positions keep the given order."""
    out: list[int] = []
    prev = 0
    for pos, toks in sorted(inserts, key=lambda x: x[0]):  # sorted() is stable
        out += ids[prev:pos]
        out += toks
        prev = pos
    return out + ids[prev:]


def special_prefix(tokenizer) -> list[int]:
    """The ids the tokenizer puts before text on its own (BOS for Llama, nothing for GPT-2)."""
    probe = tokenizer("", add_special_tokens=True)["input_ids"]
    return [t for t in probe if t != tokenizer.eos_token_id]


def prompt_frame(tokenizer, intro: str, question: str, answer_prefix: str, chat: bool,
                 system: str | None = None) -> tuple[list[int], list[int]]:
    """Ids before and after the context: `intro` and `question` in the user turn (through the
    chat template when `chat`), then `answer_prefix` as the start of the model's answer."""
    if not chat:
        before, after = intro, question + ("\n" + answer_prefix if answer_prefix else "")
        return special_prefix(tokenizer) + encode(tokenizer, before), encode(tokenizer, after)
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("chat: true but the tokenizer has no chat template; set chat: false for a base model")
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": intro + _MARK + question}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if rendered.count(_MARK) != 1:
        raise ConfigError("chat: the chat template does not keep the user message intact; set chat: false")
    before, after = rendered.split(_MARK)
    # the template writes BOS itself where the model wants one, as vLLM's chat path assumes
    return encode(tokenizer, before), encode(tokenizer, after + answer_prefix)
