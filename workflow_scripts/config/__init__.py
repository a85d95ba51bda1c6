"""The config, from YAML to cells: the schema applied with its defaults filled in (`schema`), cross
references (`matrix`), the checks a schema cannot state (`checks`: value shapes, listen addresses,
weights formats; `secrets`: no key or token anywhere a config can put one), YAML loaded within a
bound (`bounded_yaml`), derived and synthetic weights resolved to their sources (`derived`), the
matrix expanded into cells with their resolved settings (`matrix`: choose -> resolve -> expand
repeats; a cell's and its repeats' ids: `cell_ids`), a workload's sweep as one point per value
(`sweeps`), a workload's latency goal and search read with the checks a schema cannot say (`search`)
and a search's probes as cells (`probes`), fidelity goals and floor runs checked against what the
cells record and measure (`fidelity`), the Slurm and local resources each cell asks for
(`resources`), a setting given matrix-wide, per engine and per cells entry (`layers`), the energy
source each cell reads and the prices the tables read (`energy`), a replayed trace's file, window,
schedule and lengths checked by the reader's own rules (`traces`), and the commands a matrix would
run, printed without running them (`plan`, also `python -m workflow_scripts.plan`). Nothing here
downloads, builds or starts anything."""
