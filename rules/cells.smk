rule cell:
    input:
        unpack(JOBS.cell_inputs),
    output:
        **JOBS.outputs("cell"),
    log:
        "logs/cells/{cell}.log",
    group:
        JOBS.cell_group
    conda:
        "../envs/bench.yaml"
    threads: JOBS.cell_threads
    resources:
        **GRAPH.cell_rule_resources(),
    params:
        cell=JOBS.cell_settings,
        failed_attempts=JOBS.cell_failures,
        failures_dir=GRAPH.failures,
    script:
        "../workflow_scripts/entry/cell.py"


# The server a sweep's series shares (workflow_scripts.cell.shared): a service job in the
# series' group, its record written once the server answers, ended once the last point is done.
# It holds the machine (`machine=1`, the default profile's `resources`) while its points run.
# A `shell:` rule that execs Python: a `script:` job is no process Snakemake can end
# (docs/sweeps.md).
rule series_server:
    input:
        unpack(JOBS.series_inputs),
    output:
        server=service(GRAPH.series_record("{series}")),
    log:
        "logs/series/{series}.log",
    group:
        "series-{series}"
    conda:
        "../envs/bench.yaml"
    threads: 0
    resources:
        **GRAPH.series_rule_resources(),
        machine=1,
    params:
        # paths only (they change with results_dir, and then nothing has run there): a param
        # that can change would give this job a reason of its own to run (cell/series.py)
        inputs=JOBS.series_input_args,
        launch=JOBS.series_launch_file,
        failures_dir=GRAPH.failures,
    shell:
        'PYTHONPATH="$LLMBENCH_WORKFLOW${{PYTHONPATH:+:$PYTHONPATH}}" exec "$LLMBENCH_PYTHON" -m'
        " workflow_scripts.entry.series_server {log:q} --server {output.server:q}"
        " --cell-file {params.launch:q} {params.inputs} --failures-dir {params.failures_dir:q}"
