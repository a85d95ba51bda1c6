"""What a token costs as a run shows it (how each figure is read is energy/'s: docs/metrics.md,
"Energy"): a cell's metrics.json `energy` as every table, the card and the run's last lines
read it, the words of what it covers, why it was not measured, a cell's repeats folded
(`view`, stdlib: the end-of-run table reads it); dollars per million output tokens from a
cell's price, saying its basis (`cost`, stdlib); the drafter's energy change against its base
with its interval, p-value and verdict, and a series' points as one family (`change`); where
along the load a drafter stops saving energy (`crossover`); the energy table, one row per cell
and point (`table`: summary/energy.csv); the frontier of output tokens per joule against
interactivity, by the sweeps' one Pareto frontier (`frontier`), its figure (`plot`, matplotlib:
imported only by the sweeps rule, which draws); the latency goal's tables' energy at the answer
(`goal`); the card's "Energy" section (`card`); the front page's "What a token costs"
(`front`)."""
