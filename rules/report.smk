# What people read: a card per cell, the summary tables, the figures and the HTML report.
# A card has its own rule, so redoing a card never reruns a benchmark. Each takes the machine
# (`machine=1`): none runs beside a sweep's series, whose jobs hold no core (rules/cells.smk),
# so no checkpoint updates the GRAPH while a series runs (a card must never start for a point
# whose series is still running).


rule card:
    input:
        unpack(JOBS.card_goal),
        # the outputs it is compared with (workflow_scripts/fidelity/pairs.py)
        unpack(JOBS.card_fidelity),
        # for the cell's records: the cell job writes it last (outputs/record_index.py)
        metrics=GRAPH.pattern("cell", "metrics"),
    output:
        **JOBS.outputs("card"),
    log:
        "logs/cards/{cell}.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cell=JOBS.card_settings,
        fidelity=JOBS.card_fidelity_settings,
    script:
        "../workflow_scripts/entry/card.py"


# Every cell's record files, listed once (workflow_scripts.outputs.record_index): the tables and
# figures below take this index, not each cell's files (those edges would be most of a large dry
# run). A cell's metrics.json stands for its records (the cell job writes it last).
rule records:
    input:
        metrics=GRAPH.all_cell_metrics(),
    output:
        **JOBS.outputs("records"),
    log:
        "logs/records.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    script:
        "../workflow_scripts/entry/records.py"


rule aggregate:
    input:
        records=GRAPH.cell_records,
        goals=GRAPH.goal_files(),
    output:
        **JOBS.outputs("aggregate"),
    log:
        "logs/aggregate.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=JOBS.all_cells_settings,
        # each cell's price (config `cost`): out of every cell's settings, so a price edit
        # redoes the tables and reruns no cell
        prices=GRAPH.cell_prices(),
    script:
        "../workflow_scripts/entry/aggregate.py"


# Engine against engine, quant against quant (workflow_scripts.outputs.cell_pairs), beside spec_gain.
rule comparisons:
    input:
        records=GRAPH.cell_records,
    output:
        **JOBS.outputs("comparisons"),
    log:
        "logs/comparisons.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=JOBS.all_cells_settings,
    script:
        "../workflow_scripts/entry/comparisons.py"


# Asked for by GRAPH.report_inputs() only when the matrix has a sweep (a list of concurrencies or
# request rates): each point, the throughput-interactivity frontier, the drafter along the load.
rule sweeps:
    input:
        records=GRAPH.cell_records,
    output:
        **JOBS.outputs("sweeps"),
    log:
        "logs/sweeps.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=JOBS.all_cells_settings,
        gpus=JOBS.sweep_gpus,
        prices=GRAPH.cell_prices(),
    script:
        "../workflow_scripts/entry/sweeps.py"


# Asked for by GRAPH.fidelity_outputs() only when some cell is compared with another
# (workflow_scripts.fidelity.pairs): greedy agreement with its floor and verdict, the quants' KL
# divergence, the speed-fidelity frontier.
rule fidelity:
    input:
        records=GRAPH.cell_records,
        kld=GRAPH.fidelity_steps.kld_targets(),
    output:
        **JOBS.outputs("fidelity"),
    log:
        "logs/fidelity.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=JOBS.all_cells_settings,
        fidelity=JOBS.fidelity_settings,
    script:
        "../workflow_scripts/entry/fidelity.py"


rule summary_plots:
    input:
        records=GRAPH.cell_records,
    output:
        **JOBS.outputs("summary_plots"),
    log:
        "logs/summary_plots.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=JOBS.all_cells_settings,
    script:
        "../workflow_scripts/entry/summary_plots.py"


# Asked for by GRAPH.summary_figures() only when cells that are no sweep's points run at two or more
# concurrencies (a sweep's points are drawn by rule sweeps).
rule concurrency_figure:
    input:
        records=GRAPH.cell_records,
    output:
        **JOBS.outputs("concurrency_figure"),
    log:
        "logs/concurrency_figure.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=JOBS.all_cells_settings,
    script:
        "../workflow_scripts/entry/concurrency_figure.py"


# Asked for by GRAPH.summary_figures() only when some cell carries published reference figures.
rule reference_figure:
    input:
        records=GRAPH.cell_records,
    output:
        **JOBS.outputs("reference_figure"),
    log:
        "logs/reference_figure.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells=JOBS.all_cells_settings,
    script:
        "../workflow_scripts/entry/reference_figure.py"


# The report's front page (workflow_scripts/outputs/front_page.py): the index, the sweeps' and
# searches' answers, every summary figure.
rule overview:
    input:
        index=GRAPH.pattern("aggregate", "index_csv"),
        figures=GRAPH.summary_figures(),
        answers=GRAPH.front_page_inputs(),
    output:
        **JOBS.outputs("overview"),
    log:
        "logs/overview.log",
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
        **JOBS.outputs("html_report"),
    log:
        "logs/report.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        snakefile=workflow.main_snakefile,
    script:
        "../workflow_scripts/entry/html_report.py"
