"""A latency-goal search and each cell's goal as a run shows them, one job a module. Without
pandas, what the DAG asks while the Snakefile is parsed and while it walks: the goal files
written at parse time (`goals`), a probe's judgement file, `slo.json`, written, read back as a
verdict and removed when cut short (`judgement`), the walk of a search over its probes'
verdicts (`walk`), and a series' search read back from the cells folder as its outcome, with
the probes the end-of-run lines show (`outcome`). With pandas or matplotlib, for the rules that
draw and write: the goal tables, each series' largest load within its goal and the drafter at
the goal (`tables`), the figure of each series' probes (`figure`), each cell's goal columns in
the summary and its card's goal section (`cells`), and how a judgement reads in a table cell
(`text`). The planner itself is slo/search.py; the bounds and verdicts, verdicts/."""
