"""A config's published figures without running anything:

python -m workflow_scripts.outputs.reference --configfile X --reference-only --out DIR
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..config.matrix import load_cells
from ..vocabulary import ConfigError
from .tables import reference_table
from .writers import to_markdown, write_table, write_tables


def reference_only(configfile: str | Path, out_dir: str | Path) -> pd.DataFrame:
    """Tables of a config's cells and their published figures; nothing is run or read from
    results. Writes summary, index and reference tables (csv + md) into `out_dir`."""
    cells = load_cells(configfile)
    out = Path(out_dir)
    write_tables(
        [],
        cells,
        {
            **{
                f"{n}_{ext}": out / f"{n}.{ext}"
                for n in ("summary", "index")
                for ext in ("csv", "md")
            },
            "spec_gain_csv": out / "spec_gain.csv",
            "spec_gain_md": out / "spec_gain.md",
        },
        card_links=None,
    )
    table = reference_table(cells)
    write_table(
        table,
        out / "reference.csv",
        out / "reference.md",
        f"Published reference figures: {Path(configfile).name}",
        "Figures published for these cells (attached as `reference:` in the config); "
        "nothing was measured here.",
    )
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_scripts.outputs.reference", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--configfile", required=True, help="a matrix config (YAML)")
    parser.add_argument(
        "--reference-only",
        action="store_true",
        help="list the cells and their published figures without any measured results",
    )
    parser.add_argument("--out", required=True, help="directory for the tables")
    args = parser.parse_args(argv)
    if not args.reference_only:
        parser.error("only --reference-only is available here; `snakemake` builds the rest")

    try:
        table = reference_only(args.configfile, args.out)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    print(to_markdown(table, "Published reference figures"))
    print(f"tables written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
