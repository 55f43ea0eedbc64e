"""The capacity pass: what a variant's memory buys under load.

`vllm bench serve` (the load generator that ships with vLLM, so its version is the engine's) drives
the variant's own `vllm serve`, one load level at a time: concurrent users (closed loop) or a
request rate (open loop). Per prompt length the users at the SLO are searched: from a predicted
level (the users the KV pool holds whole, and those the measured prefill curve serves within the
TTFT limit) up or down a geometric grid, then halving, until the bracket is one step wide; or the
levels listed are swept. Beside each level the server's /metrics is sampled and the host's load read.

config: the `capacity:` section. loadgen: one level's run of `vllm bench serve`, and a resident one
that runs a pass's levels (resident: its process). scrape: /metrics during a level. sweep: level
records, SLO verdicts and a sweep's bracket. search: the search's moves and bracket. task: the pass
as a task of the run. predict: users the KV pool holds at once.

May import: core, stats, engine, tasks.
"""
