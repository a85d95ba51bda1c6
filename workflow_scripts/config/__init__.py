"""The config, from YAML to cells: schema validation with defaults and cross references
(`matrix`), the matrix expanded into cells with their resolved settings (`matrix`), the Slurm
and local resources each cell asks for (`resources`), and the commands a matrix would run,
printed without running them (`plan`, also `python -m workflow_scripts.plan`). Nothing here
downloads, builds or starts anything."""
