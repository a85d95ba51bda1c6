"""What the tests share, one definition each: the model entries and weights specs they run
(`models`), config builders (`config`, `pipeline`), engine helpers and the cached llama-server
(`engines`), the result fixtures (`outputs`), the README default run's results when CI names
them (`default_run`), the HTTP every stand-in server speaks (`http_standin`), and the stand-ins
for a Docker daemon (`standin_docker`) and a Slurm cluster (`slurm_cluster`). Fixtures live in
tests/conftest.py."""
