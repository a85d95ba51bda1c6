rule aggregate:
    input:
        metrics=all_cell_metrics(),
    output:
        summary_csv=f"{RESULTS}/summary/summary.csv",
        summary_md=f"{RESULTS}/summary/summary.md",
        spec_gain_csv=f"{RESULTS}/summary/spec_gain.csv",
        spec_gain_md=f"{RESULTS}/summary/spec_gain.md",
        decode_plot=report(
            f"{RESULTS}/summary/decode_tok_s.png",
            caption="../report/decode_tok_s.rst",
            category="Summary",
        ),
    log:
        "logs/aggregate.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    script:
        "../workflow_scripts/entry/aggregate.py"
