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
    group:
        cell_group
    conda:
        "../envs/bench.yaml"
    threads: cell_threads
    resources:
        **CELL_RULE_RESOURCES,
    params:
        cell=cell_settings,
        failed_attempts=cell_failures,
        failures_dir=FAILURES,
    script:
        "../workflow_scripts/entry/cell.py"


# The server a sweep's series shares (workflow_scripts.cell.shared): a service job in the
# series' group, its record written once the server answers, ended once the last point is done.
# It holds the machine (`machine=1`, the default profile's `resources`) while its points run.
rule series_server:
    input:
        unpack(series_inputs),
    output:
        server=service(f"{RESULTS}/cells/.series/{{series}}.json"),
    log:
        "logs/series/{series}.log",
    group:
        "series-{series}"
    conda:
        "../envs/bench.yaml"
    threads: 0
    resources:
        **SERIES_RULE_RESOURCES,
        machine=1,
    params:
        # paths only (they change with results_dir, and then nothing has run there): a param
        # that can change would give this job a reason of its own to run (cell/series.py)
        inputs=series_input_args,
        launch=series_launch_file,
        failures_dir=FAILURES,
    shell:
        'PYTHONPATH="$LLMBENCH_WORKFLOW" exec "$LLMBENCH_PYTHON" -m'
        " workflow_scripts.entry.series_server {log:q} --server {output.server:q}"
        " --cell-file {params.launch:q} {params.inputs} --failures-dir {params.failures_dir:q}"
