rule weights:
    input:
        unpack(JOBS.weights_inputs),
    output:
        **JOBS.outputs("weights"),
    log:
        "logs/weights/{weights}.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        spec=JOBS.weights_spec,
        failed_attempts=JOBS.weights_failures,
        failures_dir=GRAPH.failures,
    script:
        "../workflow_scripts/entry/weights.py"
