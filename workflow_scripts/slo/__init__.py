"""Latency goals (`workloads.<w>.slo`), as pure functions of a cell's request records: the
objectives, read from the validated config (`objectives`), one point judged against a goal,
with its attainment and goodput (`point`), and the search's planner, a pure replay over the
verdicts so far (`search`). The bounds and the pass / fail / unresolved word it judges with are
verdicts/' (`verdicts.bounds`, `verdicts.verdict`): fidelity goals judge with them too.

Below config and outputs: it imports only the vocabulary, the verdicts and the load client's
record and TPOT definition (one definition of each figure), so the config's goals and searches
(`config.search`), the search's files and its tables (`outputs.search`) all share it.
"""
