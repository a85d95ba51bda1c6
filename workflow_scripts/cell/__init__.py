"""The run of one cell (`run`, its rule's work from plain values in `jobs`) and what it leaves
behind (`record`): one measured attempt and measuring again while disturbed (`attempts`),
prompts checked against the server's context (`context_guard`), a replayed trace's prompts
fitted in the engine's own tokens (`trace_fit`), speculative-decoding acceptance (`specdecode`),
its energy from the source its settings name (`energy`: opened for the server's GPUs, the idle
draw across the memory baseline, the counter at the bench's edges, metrics.json's `energy`),
per-cell failure counters that make the next run retry a failed step (`failures`), a sweep's
series sharing one server (`series`, `shared`), one run at a time in a results directory
(`results_dir`), SIGTERM forwarded to the running jobs (`interrupt`), and the memory sampler
built and started one way for every server (`sampling`). The server's process,
ports and memory sampling are the process layer below (`process/`); the energy readers and
figures are `energy/`."""
