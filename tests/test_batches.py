"""Engine calls are cut by request count and by prompt tokens, so long inputs are recorded in pieces."""

from evalsuite.run.items import batches
from evalsuite.core.types import Request, Sample


def _s(i: int, tokens: int) -> Sample:
    return Sample(id=str(i), task="t", target="", request=Request(prompt_token_ids=[1] * tokens))


def test_count_limit_alone_when_prompts_are_short():
    got = [[s.id for s in b] for b in batches([_s(i, 10) for i in range(5)], 2, 10**6)]
    assert got == [["0", "1"], ["2", "3"], ["4"]]


def test_token_limit_cuts_long_prompts():
    long = [_s(i, 131_072) for i in range(20)]
    sizes = [len(b) for b in batches(long, 1024, 1_048_576)]
    assert sizes == [8, 8, 4]


def test_a_prompt_over_the_limit_is_a_batch_of_its_own():
    got = [[s.id for s in b] for b in batches([_s(0, 5), _s(1, 50), _s(2, 5)], 10, 20)]
    assert got == [["0"], ["1"], ["2"]]


def test_text_prompts_are_estimated():
    text = [Sample(id=str(i), task="t", target="", request=Request(prompt="x" * 300)) for i in range(4)]
    assert [len(b) for b in batches(text, 10, 250)] == [2, 2]
