rule engine:
    output:
        stamp=f"{RESULTS}/engines/{{engine}}.json",
    log:
        "logs/engines/{engine}.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        spec=engine_spec,
        failed_attempts=engine_failures,
        failures_dir=FAILURES,
    script:
        "../workflow_scripts/entry/engine.py"
