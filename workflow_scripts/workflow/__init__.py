"""The Snakemake side, above every other package: what rules/*.smk ask of the code. The DAG of
a validated config, built once without Snakemake (`dag`), with what it answers about output
fidelity, the KL divergence steps, a floor run's reference and what a card compares, composed
into it from declared inputs (`fidelity_steps`); what the rules hand Snakemake, their outputs
and per-job functions (`rule_jobs`), each function's signature given to Snakemake once
(`job_functions`); what rules/common.smk runs besides declaring rules, GRAPH and JOBS built and
the run's start and end handlers (`hooks`). Only `entry/` and the rules import it; `config/`
knows nothing of it nor of Snakemake (tests/test_package_root.py)."""
