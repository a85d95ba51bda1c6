"""What rules/*.smk hand Snakemake, built on the DAG (dag.py): each rule's outputs, flagged for
the report, and the functions it asks per job (inputs, params, threads, group, the report's
subcategory and labels), each a method of `RuleJobs` that reads the job's wildcards and asks the
DAG. It speaks Snakemake's types: its flags and exceptions (an unknown cell is a WorkflowError,
a judgement not yet made a pending checkpoint)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from snakemake.exceptions import IncompleteCheckpointException, WorkflowError
from snakemake.io import ancient, report

from ..outputs.labels import RULE_FILES
from ..outputs.search.judgement import read_verdict
from ..outputs.search.walk import walked_probes
from .dag import Dag
from .fidelity_steps import UnknownCell
from .job_functions import job_function


def known(lookup: Callable[[str], Any], name: str) -> Any:
    """`lookup(name)`, an id the config does not have told as Snakemake tells a workflow error."""
    try:
        return lookup(name)
    except UnknownCell as error:
        raise WorkflowError(str(error)) from None


class RuleJobs:
    """The rules' outputs and job functions for one DAG (the fidelity rules' and a card's
    comparison: its `fidelity_steps`). `checkpoints` and `workflow` are the Snakefile's own: a
    probe's verdict comes through checkpoint `cell_slo`, and the walk of a search reads whether
    this is a dry run."""

    def __init__(self, dag: Dag, checkpoints: Any, workflow: Any) -> None:
        self.dag = dag
        self.fidelity_steps = dag.fidelity_steps
        self.checkpoints = checkpoints
        self.workflow = workflow

    def outputs(self, rule: str) -> dict[str, Any]:
        """A rule's outputs by key (outputs.labels.RULE_FILES); those with a caption flagged for
        the report, a cell's own under its model with its labels. A caption is read beside
        rules/, as Snakemake reads it from the rule's file."""
        outputs = {}
        for file in RULE_FILES[rule]:
            path = self.dag.pattern(rule, file.key)
            if file.caption:
                caption = f"../report/{file.caption}.rst"
                path = report(path, caption, file.category, **self.cell_report(file.figure))
            outputs[file.key] = path
        return outputs

    # --- weights and engines ------------------------------------------------------------------

    @job_function
    def weights_inputs(self, wildcards) -> dict[str, str]:
        return self.dag.weights_inputs(wildcards.weights)

    @job_function
    def weights_spec(self, wildcards) -> str:
        return self.dag.weights_spec(wildcards.weights)

    @job_function
    def weights_failures(self, wildcards) -> int:
        return self.dag.failed_attempts.get(f"weights-{wildcards.weights}", 0)

    @job_function
    def engine_spec(self, wildcards) -> str:
        return self.dag.engine_spec(wildcards.engine)

    @job_function
    def engine_failures(self, wildcards) -> int:
        return self.dag.failed_attempts.get(f"engine-{wildcards.engine}", 0)

    # --- distribution fidelity (llama-perplexity) ---------------------------------------------

    @job_function
    def fidelity_base_inputs(self, wildcards) -> dict[str, str]:
        return known(self.fidelity_steps.fidelity_base_inputs, wildcards.model)

    @job_function
    def fidelity_base_step(self, wildcards) -> str:
        plan = known(self.fidelity_steps.kld_plan, wildcards.model)
        return self.fidelity_steps.fidelity_step(plan.model, plan.reference_quant)

    @job_function
    def fidelity_base_failures(self, wildcards) -> int:
        plan = known(self.fidelity_steps.kld_plan, wildcards.model)
        return self.fidelity_steps.fidelity_failures(plan.model, plan.reference_quant)

    @job_function
    def fidelity_kld_inputs(self, wildcards) -> dict[str, str]:
        return known(self.fidelity_steps.fidelity_kld_inputs, wildcards.weights)

    @job_function
    def fidelity_kld_step(self, wildcards) -> str:
        plan, quant = known(self.fidelity_steps.kld_quant, wildcards.weights)
        return self.fidelity_steps.fidelity_step(plan.model, quant)

    @job_function
    def fidelity_kld_failures(self, wildcards) -> int:
        plan, quant = known(self.fidelity_steps.kld_quant, wildcards.weights)
        return self.fidelity_steps.fidelity_failures(plan.model, quant)

    @job_function
    def fidelity_family_inputs(self, wildcards) -> dict[str, str]:
        return known(self.fidelity_steps.family_inputs, wildcards.series)

    @job_function
    def fidelity_family_settings(self, wildcards) -> str:
        return known(self.fidelity_steps.family_settings, wildcards.series)

    # --- cells and the series' servers --------------------------------------------------------

    @job_function
    def cell_inputs(self, wildcards) -> dict[str, Any]:
        inputs = self.dag.inputs_of(known(self.dag.cell_of, wildcards.cell))
        series = self.dag.series_of(wildcards.cell)
        if series:
            # ancient: a new server start never reruns the points that ran on an earlier one
            inputs["server"] = ancient(self.dag.series_record(series))
        reference = self.fidelity_steps.floor_reference(wildcards.cell)
        if reference:
            # ancient: a floor run waits for its reference and reads its status; a later run of
            # the reference alone does not rerun it (a floor run that failed with it is retried)
            inputs["floor_reference"] = ancient(reference)
        return inputs

    @job_function
    def cell_group(self, wildcards) -> str | None:
        series = self.dag.series_of(wildcards.cell)
        return f"series-{series}" if series else None

    @job_function
    def cell_threads(self, wildcards) -> int:
        """A point of a shared series holds no core: Snakemake adds up the threads of a group's
        jobs that start together, and its points start together (they take turns on the server).
        """
        return 0 if self.dag.series_of(wildcards.cell) else 1

    @job_function
    def cell_settings(self, wildcards) -> str:
        known(self.dag.cell_of, wildcards.cell)
        return self.dag.cell_settings(wildcards.cell)

    @job_function
    def cell_failures(self, wildcards) -> int:
        return self.dag.failed_attempts.get(wildcards.cell, 0)

    @job_function
    def series_inputs(self, wildcards) -> dict[str, str]:
        return known(self.dag.series_inputs, wildcards.series)

    @job_function
    def series_input_args(self, wildcards) -> str:
        return self.dag.series_input_args(wildcards.series)

    @job_function
    def series_launch_file(self, wildcards) -> str:
        return self.dag.series_launch_file(wildcards.series)

    # --- latency goals ------------------------------------------------------------------------

    @job_function
    def goal_input(self, wildcards) -> str:
        return self.dag.goal_input(wildcards.cell)

    def verdict(self, cell: str) -> Any:
        """A probe's verdict through its checkpoint; None while it is not judged."""
        try:
            return read_verdict(self.checkpoints.cell_slo.get(cell=cell).output.slo)
        except IncompleteCheckpointException:
            return None

    @job_function
    def slo_table_inputs(self, wildcards) -> dict[str, list[str]]:
        """Each series' search file and the judgements of the probes its walk has reached: every
        series walks at once (each stops at its own next probe). Plain paths, no
        `checkpoint_target` flag: Snakemake skips the is-the-output-older check of a job with a
        flagged input and prunes what it would need (docs/slo.md)."""
        probes = []
        for search in self.dag.searches.values():
            walked = walked_probes(
                search, self.dag.results, self.dag.goals_dir, self.verdict, self.workflow.dryrun
            )
            probes += self.dag.probe_judgements(walked)
        return {"searches": self.dag.search_files(), "probes": probes}

    # --- cards, tables, figures ---------------------------------------------------------------

    @job_function
    def card_goal(self, wildcards) -> dict[str, str]:
        return self.dag.card_goal(wildcards.cell)

    @job_function
    def card_fidelity(self, wildcards) -> dict[str, str]:
        return self.fidelity_steps.card_fidelity(wildcards.cell)

    @job_function
    def card_fidelity_settings(self, wildcards) -> str:
        return self.fidelity_steps.card_fidelity_settings(wildcards.cell)

    @job_function
    def card_settings(self, wildcards) -> str:
        return self.dag.card_settings(wildcards.cell)

    def cell_report(self, figure: str | None) -> dict[str, Callable]:
        """Where a cell's own figure sits in the report: under its model, with its labels
        (outputs.labels.report_labels); nothing for a summary file."""
        if figure is None:
            return {}

        @job_function
        def labels(wildcards):
            return self.dag.report_labels(wildcards.cell, figure)

        return {"subcategory": self.report_subcategory, "labels": labels}

    @job_function
    def report_subcategory(self, wildcards) -> str:
        return self.dag.cells[wildcards.cell].model

    @job_function
    def all_cells_settings(self, wildcards) -> str:
        return self.dag.all_cells_settings()

    @job_function
    def fidelity_settings(self, wildcards) -> str:
        return self.dag.fidelity_settings()

    @job_function
    def sweep_gpus(self, wildcards) -> str:
        return self.dag.sweep_gpus()
