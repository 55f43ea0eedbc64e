"""The users a KV pool holds at once: the bound the measured users at the SLO are set beside.

A request of P prompt and O output tokens holds ceil((P + O) / block) blocks by its last token;
a pool of T tokens holds that many requests whole at once, fewer than the engine's own
`max_num_seqs` cap where that is lower. More users than this can still be served, but only by
queueing or preempting some: the SLO usually breaks before. A hybrid model (sliding-window layers)
reports a token capacity above blocks x block size; the pool's tokens are used as reported.
"""

from __future__ import annotations

import math


def request_tokens(prompt: int, output: int, block_size: int | None) -> int:
    """KV tokens a request holds at its end, in whole blocks."""
    n = prompt + output
    return math.ceil(n / block_size) * block_size if block_size else n


def kv_bound_users(pool_tokens: int | None, prompt: int, output: int, block_size: int | None,
                   max_num_seqs: int | None = None) -> int | None:
    """Requests of `prompt` + `output` tokens the pool holds whole at once; None without a pool."""
    if not pool_tokens:
        return None
    users = pool_tokens // request_tokens(prompt, output, block_size)
    return min(users, max_num_seqs) if max_num_seqs else users
