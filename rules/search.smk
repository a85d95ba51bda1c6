# Latency goals (docs/slo.md): each cell of a workload with an `slo` judged from its requests,
# and each searched series walked probe by probe. A probe is a cell of its own, made by id when
# the walk reaches it (workflow_scripts.workflow.dag, Dag.cell_of); its judgement is a checkpoint,
# so the walk goes on only once the probe before it has a verdict (outputs/search/walk.py).


checkpoint cell_slo:
    input:
        metrics=GRAPH.pattern("cell", "metrics"),
        requests=GRAPH.pattern("cell", "requests"),
        goal=JOBS.goal_input,
    output:
        **JOBS.outputs("cell_slo"),
    log:
        "logs/slo/{cell}.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    script:
        "../workflow_scripts/entry/cell_slo.py"


rule slo_tables:
    input:
        unpack(JOBS.slo_table_inputs),
    output:
        **JOBS.outputs("slo_tables"),
    log:
        "logs/slo_tables.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells_dir=GRAPH.cells_dir,
        prices=GRAPH.cell_prices(),
    script:
        "../workflow_scripts/entry/slo_tables.py"
