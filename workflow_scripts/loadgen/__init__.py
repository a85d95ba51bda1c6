"""Streaming load generator for OpenAI-compatible servers, library and CLI (`__main__`,
`python -m workflow_scripts.loadgen`, also `llmbench-load`): the load's settings (`settings`),
its one order of warm-up, hooks and measured part (`client`), run in this process
(`closed_loop`, a conversation's turns as one session in `sessions`) or fanned out over several
(`fan_out`, how many: `processes`), one request over a connection (`request`, sockets in
`wire`), bytes -> events -> a record (`sse`, `records`; two runs' records paired there too),
records -> metrics (`metrics`), a run's records as one table of each request's figures, computed
once for every reader of them (`request_table`), prompts: a workload's dataset read by the
source of its kind, with a shared prefix where asked (`datasets`; the sources, one module a
kind, registered by kind: `sources/`), the records they make and their error (`prompts`),
arrival traces read and cut to a window (`traces`) and filled with real text (`trace_text`),
the command line a cell's load equals (`command`) and the progress line (`progress`)."""
