"""Output fidelity as a run shows it (what each figure means is fidelity/'s): each compared
pair judged once for every reader, the table and the drafter's flags beside its gain
(`compared`), the fidelity table with each pair's goal verdict (`table`), the speed-fidelity
frontier and the fastest quant within the goal, by the sweeps' one Pareto frontier
(`frontier`), its figure (`plot`, matplotlib: imported only by the rule that draws), the card's
"Fidelity" section (`card`), a sweep series' points judged once as a family for their cards
(`family`), and the `fidelity` rule's work, its tables and figure written
(`files`)."""
