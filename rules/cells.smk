rule cell:
    input:
        unpack(cell_inputs),
    output:
        metrics=f"{RESULTS}/cells/{{cell}}/metrics.json",
        requests=f"{RESULTS}/cells/{{cell}}/requests.jsonl",
        memory=f"{RESULTS}/cells/{{cell}}/memory.csv",
        server_log=f"{RESULTS}/cells/{{cell}}/server.log",
    log:
        "logs/cells/{cell}.log",
    conda:
        "../envs/bench.yaml"
    params:
        cell=cell_settings,
        failed_attempts=cell_failures,
        failures_dir=FAILURES,
    script:
        "../workflow_scripts/entry/cell.py"
