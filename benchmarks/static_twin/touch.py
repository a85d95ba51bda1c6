"""The twin's every job: write its first output (a dry run never runs it)."""

open(snakemake.output[0], "w").close()  # noqa: F821  (injected by Snakemake)
