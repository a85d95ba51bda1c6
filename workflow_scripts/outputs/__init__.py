"""What a run shows, as pure functions of the cells' metrics.json and requests.jsonl (listed once
for the table and figure rules by `record_index`): the summary and index tables (`tables`), the
spec-decode gain table (`spec_gain`), both written to disk by `writers` for the summary rules
(`aggregate`); pairs of cells, engine against engine and quant against quant (`cell_pairs`); two
result folders compared (`compare_runs`, also `python -m workflow_scripts.compare`); a config's
published figures (`reference`); result cards (`card/`); figures (`plots`, `plots_cell`); load
sweeps' tables, cards and figures (`sweeps/`); the HTML report (`report_html`) and its front
page (`front_page`); the table a run ends with (`run_end`, `compact`); a cell's intervals
(`stats`), the change between two cells (`changes`), a run's steadiness (`stability`), repeats
folded into one row (`repeats`); latency goals and their search (`search/`: the goal files,
the probes' judgements and the walk, without pandas; the goal tables, the figure, each cell's
goal columns); output fidelity (`fidelity/`: each pair judged once, the table, the
speed-fidelity frontier, its figure, the card's section, the rule's work); what a token costs
(`energy/`: each cell's energy as the tables read it, dollars per million tokens, the drafter's
energy change and where it stops saving, the energy table, the tokens-per-joule frontier and
its figure, the goal tables' figures at the answer, the card's section, the front page's
answer); conversations' TTFT
and prefix-cache hit by turn (`conversations`). What the Snakefile needs while it is parsed is
in `labels`, which imports neither pandas nor matplotlib."""
