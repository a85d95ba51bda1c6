"""Latency goals (`workloads.<w>.slo`), as pure functions of a cell's request records: the
objectives, read from the validated config (`objectives`), distribution-free confidence bounds
on a percentile and on a fraction (`bounds`), the pass / fail / unresolved word (`verdict`) and
one point judged against a goal, with its attainment and goodput (`point`), and the search's
planner, a pure replay over the verdicts so far (`search`).

Below config and outputs: it imports only the vocabulary and the load client's record and TPOT
definition (one definition of each figure), so the config's goals and searches
(`config.search`), the search's files (`outputs.search_files`) and the tables
(`outputs.slo_tables`) all share it.
"""
