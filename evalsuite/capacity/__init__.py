"""The capacity pass: what a variant's memory buys under load.

`vllm bench serve` (the load generator that ships with vLLM, so its version is the engine's) drives
the variant's own `vllm serve` at each declared load level: concurrent users (closed loop) or a
request rate (open loop, Poisson or gamma arrivals). Each level is one run of the load generator over
at least 100 random-token requests; beside it the server's /metrics is sampled for KV-cache usage,
queueing and preemptions, and the host's load is read at both ends. Per level the record keeps the
load generator's own throughput and latency percentiles and whether the declared SLO held; the
highest load meeting the SLO (every lower one too) and the level above it bracket the capacity.

config: the `capacity:` section. loadgen: one level's run of `vllm bench serve`. scrape: /metrics
during a level. sweep: level records, SLO verdicts and the capacity bracket. task: the pass as a
task of the run. predict: users the KV pool can hold at once, the bound the SLO is measured against.

May import: core, stats, engine, tasks.
"""
