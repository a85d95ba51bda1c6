# Latency goals (docs/slo.md): each cell of a workload with an `slo` judged from its requests,
# and each searched series walked probe by probe. A probe is a cell of its own, made by id when
# the walk reaches it (workflow_scripts.dag, Dag.cell_of); its judgement is a checkpoint, so the
# walk goes on only once the probe before it has a verdict (outputs/search_files.walked_probes).


checkpoint cell_slo:
    input:
        metrics=f"{RESULTS}/cells/{{cell}}/metrics.json",
        requests=f"{RESULTS}/cells/{{cell}}/requests.jsonl",
        goal=goal_input,
    output:
        slo=f"{RESULTS}/cells/{{cell}}/slo.json",
    log:
        "logs/slo/{cell}.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    script:
        "../workflow_scripts/entry/cell_slo.py"


rule slo_tables:
    input:
        unpack(slo_table_inputs),
    output:
        slo_csv=f"{RESULTS}/summary/slo.csv",
        slo_md=f"{RESULTS}/summary/slo.md",
        slo_drafter_csv=f"{RESULTS}/summary/slo_drafter.csv",
        slo_drafter_md=f"{RESULTS}/summary/slo_drafter.md",
        slo_html=report(
            f"{RESULTS}/summary/slo.html",
            caption="../report/slo_table.rst",
            category="Latency goals",
        ),
        figure=report(
            f"{RESULTS}/summary/slo_search.png",
            caption="../report/slo_search.rst",
            category="Latency goals",
        ),
        figure_svg=f"{RESULTS}/summary/slo_search.svg",
    log:
        "logs/slo_tables.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        cells_dir=f"{RESULTS}/cells",
    script:
        "../workflow_scripts/entry/slo_tables.py"
