from snakemake.utils import min_version

min_version("9.0")


# The embedded default matrix, unless --configfile gives another one: merging the two
# would mix the default's engines and models into a user's matrix.
if not config:

    configfile: "config.yaml"


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/weights.smk"
include: "rules/engines.smk"
include: "rules/cells.smk"
include: "rules/search.smk"
include: "rules/fidelity.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        GRAPH.final_outputs(),
