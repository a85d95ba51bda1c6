# What people read: a card per cell, the summary tables, the figures and the HTML report.
# A card has its own rule, so redoing a card never reruns a benchmark. Each takes the machine
# (`machine=1`): none runs beside a sweep's series, whose jobs hold no core (rules/cells.smk),
# so no checkpoint updates the GRAPH while a series runs (a card must never start for a point
# whose series is still running).


rule card:
    input:
        unpack(card_goal),
        # for the cell's records: the cell job writes it last (outputs/record_index.py)
        metrics=f"{RESULTS}/cells/{{cell}}/metrics.json",
    output:
        card_md=f"{RESULTS}/cells/{{cell}}/card.md",
        card_html=report(
            f"{RESULTS}/cells/{{cell}}/card.html",
            caption="../report/card.rst",
            category="Cells",
            subcategory=cell_report_subcategory,
            labels=cell_report_labels("result card"),
        ),
        latency_plot=report(
            f"{RESULTS}/cells/{{cell}}/latency.png",
            caption="../report/cell_latency.rst",
            category="Cells",
            subcategory=cell_report_subcategory,
            labels=cell_report_labels("TTFT and TPOT"),
        ),
        memory_plot=report(
            f"{RESULTS}/cells/{{cell}}/memory.png",
            caption="../report/cell_memory.rst",
            category="Memory",
            subcategory=cell_report_subcategory,
            labels=cell_report_labels("memory over time"),
        ),
    log:
        "logs/cards/{cell}.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cell=card_settings,
    script:
        "../workflow_scripts/entry/card.py"


# Every cell's record files, listed once (workflow_scripts.outputs.record_index): the tables and
# figures below take this index, not each cell's files, which made most of a large dry run. A
# cell's metrics.json stands for its records (the cell job writes it last).
rule records:
    input:
        metrics=GRAPH.all_cell_metrics(),
    output:
        records=CELL_RECORDS,
    log:
        "logs/records.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    script:
        "../workflow_scripts/entry/records.py"


rule aggregate:
    input:
        records=CELL_RECORDS,
        goals=GRAPH.goal_files(),
    output:
        summary_csv=f"{RESULTS}/summary/summary.csv",
        summary_md=f"{RESULTS}/summary/summary.md",
        index_csv=f"{RESULTS}/summary/index.csv",
        index_md=f"{RESULTS}/summary/index.md",
        spec_gain_csv=f"{RESULTS}/summary/spec_gain.csv",
        spec_gain_md=f"{RESULTS}/summary/spec_gain.md",
        summary_html=report(
            f"{RESULTS}/summary/summary.html",
            caption="../report/summary.rst",
            category="Summary",
        ),
        spec_gain_html=report(
            f"{RESULTS}/summary/spec_gain.html",
            caption="../report/spec_gain_table.rst",
            category="Speculative decoding",
        ),
    log:
        "logs/aggregate.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=all_cells_settings,
    script:
        "../workflow_scripts/entry/aggregate.py"


# Engine against engine, quant against quant (workflow_scripts.outputs.cell_pairs), beside spec_gain.
rule comparisons:
    input:
        records=CELL_RECORDS,
    output:
        comparisons_csv=f"{RESULTS}/summary/comparisons.csv",
        comparisons_md=f"{RESULTS}/summary/comparisons.md",
        comparisons_html=report(
            f"{RESULTS}/summary/comparisons.html",
            caption="../report/comparisons_table.rst",
            category="Comparisons",
        ),
    log:
        "logs/comparisons.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=all_cells_settings,
    script:
        "../workflow_scripts/entry/comparisons.py"


# Asked for by GRAPH.report_inputs() only when the matrix has a sweep (a list of concurrencies or
# request rates): each point, the throughput-interactivity frontier, the drafter along the load.
rule sweeps:
    input:
        records=CELL_RECORDS,
    output:
        sweeps_csv=f"{RESULTS}/summary/sweeps.csv",
        sweeps_md=f"{RESULTS}/summary/sweeps.md",
        pareto_csv=f"{RESULTS}/summary/pareto.csv",
        pareto_md=f"{RESULTS}/summary/pareto.md",
        spec_gain_sweep_csv=f"{RESULTS}/summary/spec_gain_sweep.csv",
        spec_gain_sweep_md=f"{RESULTS}/summary/spec_gain_sweep.md",
        spec_crossover_csv=f"{RESULTS}/summary/spec_crossover.csv",
        spec_crossover_md=f"{RESULTS}/summary/spec_crossover.md",
        sweeps_html=report(
            f"{RESULTS}/summary/sweeps.html",
            caption="../report/sweeps_table.rst",
            category="Sweeps",
        ),
        pareto_plot=report(
            f"{RESULTS}/summary/pareto.png",
            caption="../report/pareto.rst",
            category="Sweeps",
        ),
        pareto_svg=f"{RESULTS}/summary/pareto.svg",
        latency_plot=report(
            f"{RESULTS}/summary/sweep_latency.png",
            caption="../report/sweep_latency.rst",
            category="Sweeps",
        ),
        latency_svg=f"{RESULTS}/summary/sweep_latency.svg",
        spec_gain_plot=report(
            f"{RESULTS}/summary/spec_gain_sweep.png",
            caption="../report/spec_gain_sweep.rst",
            category="Sweeps",
        ),
        spec_gain_svg=f"{RESULTS}/summary/spec_gain_sweep.svg",
    log:
        "logs/sweeps.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=all_cells_settings,
        gpus=sweep_gpus,
    script:
        "../workflow_scripts/entry/sweeps.py"


rule summary_plots:
    input:
        records=CELL_RECORDS,
    output:
        decode_plot=report(
            f"{RESULTS}/summary/decode_tok_s.png",
            caption="../report/decode_tok_s.rst",
            category="Summary",
        ),
        decode_svg=f"{RESULTS}/summary/decode_tok_s.svg",
        latency_plot=report(
            f"{RESULTS}/summary/latency.png",
            caption="../report/latency.rst",
            category="Summary",
        ),
        latency_svg=f"{RESULTS}/summary/latency.svg",
        memory_plot=report(
            f"{RESULTS}/summary/peak_memory.png",
            caption="../report/peak_memory.rst",
            category="Memory",
        ),
        memory_svg=f"{RESULTS}/summary/peak_memory.svg",
        spec_gain_plot=report(
            f"{RESULTS}/summary/spec_gain.png",
            caption="../report/spec_gain.rst",
            category="Speculative decoding",
        ),
        spec_gain_svg=f"{RESULTS}/summary/spec_gain.svg",
    log:
        "logs/summary_plots.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=all_cells_settings,
    script:
        "../workflow_scripts/entry/summary_plots.py"


# Asked for by GRAPH.summary_figures() only when cells that are no sweep's points run at two or more
# concurrencies (a sweep's points are drawn by rule sweeps).
rule concurrency_figure:
    input:
        records=CELL_RECORDS,
    output:
        concurrency_plot=report(
            f"{RESULTS}/summary/throughput_vs_concurrency.png",
            caption="../report/throughput_vs_concurrency.rst",
            category="Summary",
        ),
        concurrency_svg=f"{RESULTS}/summary/throughput_vs_concurrency.svg",
    log:
        "logs/concurrency_figure.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=all_cells_settings,
    script:
        "../workflow_scripts/entry/concurrency_figure.py"


# Asked for by GRAPH.summary_figures() only when some cell carries published reference figures.
rule reference_figure:
    input:
        records=CELL_RECORDS,
    output:
        reference_plot=report(
            f"{RESULTS}/summary/measured_vs_reference.png",
            caption="../report/measured_vs_reference.rst",
            category="Summary",
        ),
        reference_svg=f"{RESULTS}/summary/measured_vs_reference.svg",
    log:
        "logs/reference_figure.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=all_cells_settings,
    script:
        "../workflow_scripts/entry/reference_figure.py"


# The report's front page (workflow_scripts/outputs/front_page.py): the index, the sweeps' and
# searches' answers, every summary figure.
rule overview:
    input:
        index=f"{RESULTS}/summary/index.csv",
        figures=GRAPH.summary_figures(),
        answers=GRAPH.front_page_inputs(),
    output:
        overview=f"{RESULTS}/summary/overview.html",
    log:
        "logs/overview.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    script:
        "../workflow_scripts/entry/overview.py"


# Snakemake's self-contained HTML report, built by the run itself as its last job.
rule html_report:
    input:
        GRAPH.report_inputs(),
        stylesheet=workflow.source_path("../report/report.css"),
    output:
        html=f"{RESULTS}/report.html",
    log:
        "logs/report.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        snakefile=workflow.main_snakefile,
    script:
        "../workflow_scripts/entry/html_report.py"
