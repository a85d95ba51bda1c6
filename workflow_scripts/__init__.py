"""LLM serving benchmark pipeline: all logic behind the Snakemake rules.

Packages, top to bottom (each imports only from those below it): `workflow` (the Snakemake
side: the DAG of a config, what the rules ask of it, the run's hooks) and `entry` (the rules'
bodies) side by side at the top, `outputs` (tables, cards, figures, the report), `cell` (the
run of one cell), `config` (the config to cells), `fidelity` (output fidelity: which cell is
compared with which, greedy agreement and its floor, goals, llama-perplexity's KL divergence),
`slo` (latency goals and the search's planner), `verdicts` (what both kinds of goal and the
sweeps judge with: bounds and intervals, the verdict words, several verdicts read as one
family), `energy` (what a token costs: the GPUs' and CPUs' energy counters read, and a cell's
energy figures), `engines` (one adapter per engine kind), `weights` (weights fetched, made or
derived), `loadgen` (the load generator), `process` (a server process, ports, memory). `plan`
and `compare` are the `python -m` CLIs.
Leaves: `vocabulary` (the words every package shares), `venv`, `registry_fetch`, `atomic`,
`paths`, `text`, `redact`, `terminal`, `exits`.
"""
