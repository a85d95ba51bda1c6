"""LLM serving benchmark pipeline: all logic behind the Snakemake rules.

Packages, top to bottom (each imports only from those below it): `entry` (the rules' bodies),
`outputs` (tables, cards, figures, the report), `cell` (the run of one cell), `config` (the
config to cells), `fidelity` (output fidelity: which cell is compared with which, greedy
agreement and its floor, goals, llama-perplexity's KL divergence), `slo` (latency goals and the
search's planner), `energy` (what a token costs: the GPUs' and CPUs' energy counters read, and a
cell's energy figures), `engines` (one adapter per engine kind), `weights` (weights fetched,
made or derived), `loadgen` (the load generator), `process` (a server process, ports, memory). Above
them all, `dag` builds the DAG of a config (its fidelity steps in `dag_fidelity`) and
`rule_jobs` hands the rules what they ask of it (each rule's outputs, its per-job functions);
`workflow_hooks` is what rules/common.smk runs besides declaring rules; `plan` and
`compare` are the `python -m` CLIs.
Below `slo` and `fidelity`, above `loadgen`: `verdicts` (what both kinds of goal and the sweeps
judge with: bounds and intervals, the verdict words, several verdicts read as one family).
Leaves: `vocabulary` (the words every package shares), `job_functions` (a per-job function's
signature given to Snakemake once), `venv`, `registry_fetch`, `atomic`, `paths`, `text`,
`redact`, `terminal`, `exits`.
"""
