# GGUF quants' KL divergence (workflow_scripts.fidelity.kld): one text, the reference's logits
# once per model, each quant against them; a failed step says why and is retried next run.


rule fidelity_text:
    output:
        **JOBS.outputs("fidelity_text"),
    log:
        "logs/fidelity/text.log",
    conda:
        "../envs/bench.yaml"
    params:
        settings=GRAPH.fidelity_steps.fidelity_text_settings(),
    script:
        "../workflow_scripts/entry/fidelity_text.py"


rule fidelity_base:
    input:
        unpack(JOBS.fidelity_base_inputs),
    output:
        **JOBS.outputs("fidelity_base"),
    log:
        "logs/fidelity/{model}.base.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        step=JOBS.fidelity_base_step,
        failed_attempts=JOBS.fidelity_base_failures,
        failures_dir=GRAPH.failures,
    script:
        "../workflow_scripts/entry/fidelity_base.py"


rule fidelity_kld:
    input:
        unpack(JOBS.fidelity_kld_inputs),
    output:
        **JOBS.outputs("fidelity_kld"),
    log:
        "logs/fidelity/{weights}.log",
    conda:
        "../envs/bench.yaml"
    resources:
        machine=1,
    params:
        step=JOBS.fidelity_kld_step,
        failed_attempts=JOBS.fidelity_kld_failures,
        failures_dir=GRAPH.failures,
    script:
        "../workflow_scripts/entry/fidelity_kld.py"


# A sweep series' fidelity verdicts as one family (workflow_scripts.outputs.fidelity.family),
# once per series: each point's card reads its own verdict there.
rule fidelity_family:
    input:
        unpack(JOBS.fidelity_family_inputs),
    output:
        **JOBS.outputs("fidelity_family"),
    log:
        "logs/fidelity/{series}.family.log",
    conda:
        "../envs/bench.yaml"
    params:
        members=JOBS.fidelity_family_settings,
    script:
        "../workflow_scripts/entry/fidelity_family.py"
