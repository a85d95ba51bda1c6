rule weights:
    input:
        unpack(weights_inputs),
    output:
        manifest=f"{RESULTS}/weights/{{weights}}.json",
    log:
        "logs/weights/{weights}.log",
    localrule: True
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        spec=weights_spec,
        failed_attempts=weights_failures,
        failures_dir=FAILURES,
    script:
        "../workflow_scripts/entry/weights.py"
