"""`python -m workflow_scripts.compare`, the documented CLI: forwards to
workflow_scripts.outputs.compare_runs, where the comparison lives."""

from workflow_scripts.outputs.compare_runs import main

if __name__ == "__main__":
    raise SystemExit(main())
