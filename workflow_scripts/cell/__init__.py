"""The run of one cell (`run`): the server's process lifecycle (`server`), memory sampling and
its watchdog (`memory`), prompts checked against the server's context (`context_guard`),
speculative-decoding acceptance (`specdecode`), who else used the machine (`machine_use`),
per-cell failure counters that make the next run retry a failed step (`failures`) and SIGTERM
forwarded to the running jobs (`interrupt`)."""
