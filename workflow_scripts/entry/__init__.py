"""Thin Snakemake `script:` entry points: each reads the `snakemake` object and calls one
function of workflow_scripts, with stderr going to the rule's log."""
