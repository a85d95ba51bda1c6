"""Output fidelity: what a quant, a drafter or another engine does to what the model says.

- `pairs`: which cell is compared with which (kinds quant, drafter, engine, floor) and the
  model's reference quant; stdlib only (the DAG uses it while the Snakefile is parsed).
- `agreement`: greedy agreement of two cells' outputs, its noise floor and the verdict.
- `judgement`: a pair's one judgement from its runs (a run that did not finish: no verdict),
  what the table, the card and the drafter flags all show.
- `series`: a sweep series' verdicts as a family: Holm's step-down over its points and one
  verdict pooled over them (an exact stratified test).
- `goals`: a fidelity goal judged pass / fail / unresolved from the figures' intervals.
- `kld_plan`: which KL divergence steps a matrix has, each step's settings and failure key,
  and whether a step's record can be used; parse time, stdlib and parse-time modules only (the
  DAG and the config checks ask it while the Snakefile is parsed).
- `kld`: llama-perplexity run, its KL divergence of a GGUF quant against the reference's
  logits, on the fixed text it makes; what the tool prints is read by `perplexity_output`.

The table, the frontier, the figure and the card's section built on them are outputs'
(outputs/fidelity/).
"""
