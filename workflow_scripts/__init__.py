"""LLM serving benchmark pipeline: all logic behind the Snakemake rules."""
