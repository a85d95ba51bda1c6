"""What a run shows, as pure functions of the cells' metrics.json and requests.jsonl: summary
and index tables (`aggregate`), the spec-decode gain table, comparisons engine against engine
and quant against quant (`comparisons`), two result folders compared (`compare`, also
`python -m workflow_scripts.compare`), result cards (`cards`), figures (`plots`, `plots_cell`),
the HTML report (`report_html`), the table a run ends with (`run_end`, `compact`), intervals
(`stats`) and repeats folded into one row (`repeats`)."""
