rule engine:
    output:
        **JOBS.outputs("engine"),
    log:
        "logs/engines/{engine}.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        spec=JOBS.engine_spec,
        failed_attempts=JOBS.engine_failures,
        failures_dir=GRAPH.failures,
    script:
        "../workflow_scripts/entry/engine.py"
