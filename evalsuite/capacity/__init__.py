"""The capacity pass: what a variant's memory buys under load.

`vllm bench serve` (the load generator that ships with vLLM, so its version is the engine's) drives
the variant's own `vllm serve` at each declared load level: a number of concurrent users (closed
loop) or a request rate (open loop, Poisson or gamma arrivals). Each level is one run of the load
generator over at least 100 random-token requests; beside it the server's /metrics is sampled for
KV-cache usage, queueing and preemptions, and the host's load is read at both ends. The record per
level keeps throughput and TTFT/ITL/TPOT/E2E percentiles as the load generator computed them, and
whether the declared SLO held. Over the levels, the highest load meeting the SLO (with every lower
one meeting it too) and the level above it that broke it bracket the variant's capacity.

config: the `capacity:` section. loadgen: one level's run of `vllm bench serve`. scrape: /metrics
during a level. sweep: level records, SLO verdicts and the capacity bracket. task: the pass as a
task of the run. predict: users the KV pool can hold at once, the bound the SLO is measured against.

May import: core, stats, engine, tasks.
"""
