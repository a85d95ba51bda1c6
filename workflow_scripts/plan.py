"""`python -m workflow_scripts.plan`, the documented CLI: forwards to
workflow_scripts.config.plan, where the plan lives."""

from workflow_scripts.config.plan import main

if __name__ == "__main__":
    raise SystemExit(main())
