"""The run of one cell (`run`) and what it leaves behind (`record`): prompts checked against the
server's context (`context_guard`), speculative-decoding acceptance (`specdecode`), per-cell
failure counters that make the next run retry a failed step (`failures`) and SIGTERM forwarded
to the running jobs (`interrupt`). The server's process, ports and memory sampling are the
process layer below (`process/`)."""
