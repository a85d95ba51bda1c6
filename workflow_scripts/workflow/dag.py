"""The DAG of a validated config, built once, without Snakemake: the cells, the series that share
a server, the searches and their goals, the weights entries, each job's resources, the target
lists and the files written while the Snakefile is parsed. `rules/*.smk` declare rules; each of
their job functions is a line that asks this.

Stdlib and the parse-time modules only: the Snakefile's parse imports no pandas, numpy or
matplotlib (tests/test_parse_imports.py).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..atomic import param_json
from ..cell.failures import bump_failures, failure_counts
from ..cell.record import cut_short, write_unreadable
from ..cell.results_dir import write_at_parse
from ..cell.series import forget_provenance, launch_path, record_path, write_series_files
from ..config.energy import prices_by_cell, without_prices
from ..config.matrix import build_matrix, validate_config
from ..config.probes import Search, probe_of
from ..config.resources import (
    declared_resources,
    resources_by_cell,
    resources_by_search,
    without_resources,
)
from ..config.sweeps import launch_cell, series_resources, shared_series
from ..fidelity.pairs import floor_of
from ..outputs.labels import (
    RULE_FILES,
    content_answers,
    front_page_files,
    optional_figure_rules,
    report_labels,
    rule_file,
    sweep_cell_ids,
)
from ..outputs.record_index import INVALID_RESULT
from ..outputs.search.goals import goal_path, goals_of, search_path, write_goal_files
from ..outputs.search.outcome import probe_cells
from ..slo.objectives import Slo
from ..vocabulary import Cell
from ..weights.fetch import step_engine, weights_dependencies, with_dependencies
from .fidelity_steps import FidelitySteps, UnknownCell
from .job_functions import with_job_functions

# The tables every run's targets name (rule and key in outputs.labels.RULE_FILES).
SUMMARY_TABLES = (
    ("aggregate", "summary_csv"),
    ("aggregate", "summary_md"),
    ("aggregate", "spec_gain_csv"),
    ("aggregate", "spec_gain_md"),
    ("comparisons", "comparisons_csv"),
)


@dataclass
class Dag:
    """What the rules need of a config. `config` is the validated config without resources
    and prices (resources say where a cell runs, prices what it costs, neither what it
    measures: kept out of every param but the tables'; `prices` by cell, config.energy); what
    it answers about output fidelity is its `fidelity_steps`."""

    config: dict[str, Any]
    cells: dict[str, Cell]
    searches: dict[str, Search]
    cell_resources: dict[str, dict[str, Any]]
    search_resources: dict[str, dict[str, Any]]
    series: dict[str, list[Cell]]
    series_resources: dict[str, dict[str, Any]]
    failed_attempts: dict[str, int]
    weights: dict[str, dict[str, Any]]
    goals: dict[str, Slo]
    fidelity_steps: FidelitySteps
    prices: dict[str, Any] = field(default_factory=dict)

    # --- where things are ---------------------------------------------------------------------

    @property
    def results(self) -> str:
        return self.config["results_dir"]

    def pattern(self, rule: str, key: str) -> str:
        """One of a rule's files, its wildcards left in (`{cell}`): what the rule declares."""
        return f"{self.results}/{rule_file(rule, key)}"

    def path(self, rule: str, key: str, **wildcards: str) -> str:
        """One of a rule's files for one job."""
        return rule_path(self.results, rule, key, **wildcards)

    def rule_paths(self, rule: str) -> list[str]:
        """Every file of a rule without wildcards, in its order."""
        return [f"{self.results}/{file.path}" for file in RULE_FILES[rule]]

    @property
    def cells_dir(self) -> str:
        return f"{self.results}/cells"

    @property
    def failures(self) -> str:
        return f"{self.results}/failures"

    @property
    def goals_dir(self) -> str:
        return f"{self.results}/goals"

    @property
    def cell_records(self) -> str:
        """What every table and figure reads: each cell's record files, listed."""
        return self.path("records", "records")

    def series_record(self, series: str) -> str:
        return str(record_path(self.cells_dir, series))

    def series_launch_file(self, series: str) -> str:
        return str(launch_path(self.cells_dir, series))

    # --- cells --------------------------------------------------------------------------------

    def cell_of(self, cell_id: str) -> Cell:
        """The cell an id names: one of the matrix, or a probe of a search (built from its id)."""
        if cell_id in self.cells:
            return self.cells[cell_id]
        probe = probe_of(self.searches, cell_id)
        if probe is None:
            raise UnknownCell(
                f"no cell {cell_id!r} in this config; "
                "`python -m workflow_scripts.plan` lists its cells"
            )
        search, key = probe
        return search.probe(key)

    def series_of(self, cell_id: str) -> str | None:
        """The series whose shared server a point runs on (None: the cell starts its own)."""
        return self._series_of.get(cell_id)

    def inputs_of(self, cell: Cell) -> dict[str, str]:
        """The stamps of what a cell runs: its engine, its weights, its drafter's weights."""
        if cell.blocked:
            return {}
        inputs = {
            "engine": self.path("engine", "stamp", engine=cell.engine),
            "weights": self.path("weights", "manifest", weights=cell.weights_key),
        }
        if cell.drafter_weights_key:
            inputs["drafter_weights"] = self.path(
                "weights", "manifest", weights=cell.drafter_weights_key
            )
        return inputs

    def cell_settings(self, cell_id: str) -> str:
        """A cell's param. Published reference figures feed only cards and tables: editing one
        never reruns a cell."""
        cell = self._cell_dicts.get(cell_id) or self.cell_of(cell_id).to_dict()
        return param_json({**cell, "reference": {}})

    def card_settings(self, cell_id: str) -> str:
        return param_json(self._cell_dicts[cell_id])

    def cell_resources_of(self, cell_id: str) -> dict[str, Any]:
        if cell_id in self.cell_resources:
            return self.cell_resources[cell_id]
        return self.search_resources[probe_of(self.searches, cell_id)[0].series]

    def cell_rule_resources(self) -> dict[str, Any]:
        """The cell rule's resources: what the Slurm executor requests, and what a local
        `--resources gpu=N` counts."""
        declared = declared_resources(
            [*self.cell_resources.values(), *self.search_resources.values()],
            lambda wildcards: self.cell_resources_of(wildcards.cell),
        )
        return with_job_functions(declared)

    def series_rule_resources(self) -> dict[str, Any]:
        """The series' server rule's; it holds the machine whatever its cells ask."""
        declared = declared_resources(
            list(self.series_resources.values()),
            lambda wildcards: self.series_resources[wildcards.series],
            leave_out={"machine"},
        )
        return with_job_functions(declared)

    # --- a series' server ---------------------------------------------------------------------

    def series_inputs(self, series: str) -> dict[str, str]:
        """What a series' server job reads: what its launch point's cell job reads."""
        if series not in self.series:
            raise UnknownCell(f"no series {series!r} shares a server in this config")
        return self.inputs_of(launch_cell(self.series[series]))

    def series_input_args(self, series: str) -> str:
        """The series' inputs as its server command's flags (`--engine PATH --weights PATH`)."""
        return " ".join(
            f"--{name.replace('_', '-')} {shlex.quote(path)}"
            for name, path in self.series_inputs(series).items()
        )

    # --- weights and engines ------------------------------------------------------------------

    def weights_spec(self, key: str) -> str:
        return param_json(self.weights[key])

    def engine_spec(self, engine: str) -> str:
        return param_json(self.config["engines"][engine])

    def weights_inputs(self, key: str) -> dict[str, str]:
        """What a weights step reads: the manifest of the entry it is built from (a synthetic
        model's tokenizer, a derived entry's source) and the stamp of the engine whose tools a
        derived entry runs."""
        spec = self.weights[key]
        inputs = {}
        for source in weights_dependencies(spec):  # at most one
            inputs["source"] = self.path("weights", "manifest", weights=source)
        engine = step_engine(spec)
        if engine:
            inputs["engine"] = self.path("engine", "stamp", engine=engine)
        return inputs

    # --- latency goals ------------------------------------------------------------------------

    def goal_input(self, cell_id: str) -> str:
        """The goal of the workload a cell comes from (a probe's or a sweep point's: its own)."""
        return str(goal_path(self.goals_dir, self.cell_of(cell_id).workload_name))

    def card_goal(self, cell_id: str) -> dict[str, str]:
        """The goal a cell's card judges it against, where its workload has one."""
        has_goal = self.cell_of(cell_id).workload_name in self.goals
        return {"goal": self.goal_input(cell_id)} if has_goal else {}

    def goal_files(self) -> list[str]:
        return [str(goal_path(self.goals_dir, workload)) for workload in self.goals]

    def search_files(self) -> list[str]:
        return [str(search_path(self.goals_dir, series)) for series in self.searches]

    def search_outputs(self) -> list[str]:
        """What the targets gain when the matrix has a search (none without one)."""
        if not self.searches:
            return []
        return [path for path in self.rule_paths("slo_tables") if not path.endswith(".svg")]

    def probe_judgements(self, probes: list[str]) -> list[str]:
        return [self.path("cell_slo", "slo", cell=cell_id) for cell_id in probes]

    def run_end_cells(self) -> list[str]:
        """What the end-of-run lines show: the matrix's cells, then every probe run so far."""
        return [*self.cells, *probe_cells(self.cells_dir, self.searches.values())]

    # --- tables, figures, the report ----------------------------------------------------------

    def all_cell_metrics(self) -> list[str]:
        return [self.path("cell", "metrics", cell=cell_id) for cell_id in self.cells]

    def summary_figures(self) -> list[str]:
        """Every summary figure this matrix gets: concurrency and reference figures only when
        the matrix varies concurrency outside its sweeps or has published figures."""
        rules = ["summary_plots", *optional_figure_rules(list(self.cells.values()))]
        return [path for rule in rules for path in self.rule_paths(rule) if path.endswith(".png")]

    def sweep_outputs(self) -> list[str]:
        """The sweep tables and figures, only for a matrix with a sweep."""
        return self.rule_paths("sweeps") if sweep_cell_ids(list(self.cells.values())) else []

    def fidelity_outputs(self) -> list[str]:
        """The fidelity tables and figure, only for a matrix with a compared pair."""
        return self.rule_paths("fidelity") if self.fidelity_steps.pairs else []

    def fidelity_settings(self) -> str:
        return param_json(self.fidelity_steps.settings.to_dict())

    def sweep_gpus(self) -> str:
        """Each point's GPU count (resources.gpu, kept out of the cells' settings): throughput
        per GPU."""
        points = sweep_cell_ids(list(self.cells.values()))
        return param_json({cell: self.cell_resources[cell].get("gpu") for cell in points})

    def cell_prices(self) -> str:
        """Each cell's price (and each searched series', its probes'), or null: `cost` kept
        out of every cell's settings, for the tables' dollar figures (config.energy)."""
        return param_json(self.prices)

    def all_cells_settings(self) -> str:
        return self._all_cells_settings

    def carded_cells(self) -> list[str]:
        """The cells with a card in the report: not a floor run (its reference's fidelity row
        says what it measured)."""
        return [cell_id for cell_id in self.cells if floor_of(cell_id) is None]

    def report_labels(self, cell_id: str, figure: str) -> dict[str, str]:
        return report_labels(self.cells[cell_id], figure)

    def front_page_inputs(self) -> list[str]:
        """The sweep, search, fidelity and content outputs the report's front page shows beside
        the index."""
        summaries = [*self.sweep_outputs(), *self.search_outputs(), *self.fidelity_outputs()]
        tables = ["energy", *content_answers(list(self.cells.values()))]  # energy: every matrix
        summaries += [self.path("aggregate", f"{table}_csv") for table in tables]
        return front_page_files(summaries)

    def report_inputs(self) -> list[str]:
        """What the HTML report shows: the cards, tables, figures and its front page."""
        searched = [p for p in self.search_outputs() if p.endswith((".html", ".png"))]
        return [
            *[self.path("card", "card_md", cell=cell_id) for cell_id in self.carded_cells()],
            self.path("aggregate", "index_md"),
            self.path("comparisons", "comparisons_md"),
            *self.summary_figures(),
            *self.sweep_outputs(),
            *self.fidelity_outputs(),
            self.path("overview", "overview"),
            *searched,
        ]

    def final_outputs(self) -> list[str]:
        """The tables and the report. The cards come in through the report (html_report takes
        them): listed here too, each card would be one more edge for a large matrix's DAG."""
        return [
            *(self.path(rule, key) for rule, key in SUMMARY_TABLES),
            self.path("summary_plots", "decode_plot"),
            *self.sweep_outputs(),
            *self.search_outputs(),
            *self.fidelity_outputs(),
            self.path("html_report", "html"),
        ]

    # --- parse time ---------------------------------------------------------------------------

    def write_parse_files(self, workdir: str = ".") -> None:
        """The files the rules read that come from the config, each written only when it
        changes (skipped with a line on a read-only results dir: a dry run needs none):
        - each series' server record and launch cell, never a param
          (workflow_scripts.cell.series.write_series_files says why), and what Snakemake kept
          of an earlier server job forgotten;
        - each workload's goal and each search's spec: a changed goal reruns the judgements and
          the tables, never a cell (no cell reads it)."""
        launches = {name: self._cell_dicts[launch_cell(p).id] for name, p in self.series.items()}
        write_at_parse(
            "the shared series' launch files", write_series_files, self.cells_dir, launches
        )
        forget_provenance(workdir, [self.series_record(name) for name in self.series])
        write_at_parse(
            "the goal files",
            write_goal_files,
            self.goals_dir,
            self.goals,
            self.searches.values(),
        )

    def heal_cells(self, dry_run: bool = False, say: Callable[[str], None] | None = None) -> None:
        """Each cell's metrics.json that does not parse (cut short) named and replaced by a
        failed record whose failure counter is bumped, so this run measures the cell again as
        it retries any failed cell (a missing metrics.json alone would not: Snakemake reruns
        no job for a missing file whose consumers are up to date); a dry run names it and
        leaves it. A probe's are removed on its search's walk (outputs/search/judgement.py)."""
        say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        for cell_id, cell in self.cells.items():
            path = Path(self.cells_dir) / cell_id / "metrics.json"
            reason = cut_short(path)
            if reason is None:
                continue
            if dry_run:
                say(
                    f"{path} does not parse ({reason}): a run marks the cell failed and "
                    "measures it again"
                )
                continue
            why = f"{INVALID_RESULT}: {path} did not parse ({reason}); measured again"
            try:
                write_unreadable(cell, path.parent, why)
                self.failed_attempts[cell_id] = bump_failures(self.failures, cell_id)
            except OSError as error:
                say(f"{path} does not parse ({reason}) and cannot be replaced ({error})")
                continue
            say(f"{path} does not parse ({reason}): the cell is marked failed and measured again")

    def __post_init__(self) -> None:
        self._series_of = {p.id: name for name, points in self.series.items() for p in points}
        # Each cell as plain data, made once: Snakemake asks for these params for every job of a
        # large matrix. The rules' scripts rebuild the cells from them (Cell.from_dict).
        self._cell_dicts = {cell_id: cell.to_dict() for cell_id, cell in self.cells.items()}
        self._all_cells_settings = param_json(list(self._cell_dicts.values()))


def rule_path(results: str, rule: str, key: str, **wildcards: str) -> str:
    """One of a rule's files for one job, under the results dir `results`."""
    return f"{results}/{rule_file(rule, key).format(**wildcards)}"


def build_dag(raw_config: dict[str, Any]) -> Dag:
    """The DAG of a config; ConfigError names the key of anything wrong, before anything
    runs."""
    validated = validate_config(raw_config)
    config = without_prices(without_resources(validated))
    matrix = build_matrix(validated)  # its cells leave resources and prices out themselves
    cells = {cell.id: cell for cell in matrix.cells}
    series = shared_series(cells.values())
    cell_resources, series_resources_ = series_resources(
        series, resources_by_cell(validated, matrix)
    )
    failed_attempts = failure_counts(f"{config['results_dir']}/failures")
    path = partial(rule_path, config["results_dir"])
    fidelity_steps = FidelitySteps.of_config(config, cells, failed_attempts, path)
    weights: dict[str, dict[str, Any]] = {}
    # A search's probes run its template's weights.
    for cell in [*cells.values(), *(search.template for search in matrix.searches.values())]:
        if cell.blocked:
            continue
        weights[cell.weights_key] = cell.weights
        if cell.drafter_weights:
            weights[cell.drafter_weights_key] = cell.drafter_weights
    # The reference quant whose logits the KL divergence steps compare with, run by no cell
    # maybe (the default's f16 is only the source of the quants).
    for plan in fidelity_steps.kld.values():
        quants = config["models"][plan.model]["quants"]
        weights.setdefault(plan.reference_key, quants[plan.reference_quant]["weights"])
    return Dag(
        config=config,
        cells=cells,
        searches=matrix.searches,
        cell_resources=cell_resources,
        search_resources=resources_by_search(validated, matrix),
        series=series,
        series_resources=series_resources_,
        failed_attempts=failed_attempts,
        weights=with_dependencies(weights),
        goals=goals_of(config),
        fidelity_steps=fidelity_steps,
        prices=prices_by_cell(
            validated, [*cells.values(), *(s.template for s in matrix.searches.values())]
        ),
    )
