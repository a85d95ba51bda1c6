"""Streaming load generator for OpenAI-compatible servers, library and CLI (`__main__`,
`python -m workflow_scripts.loadgen`, also `llmbench-load`): the load's settings (`settings`),
its one order of warm-up, hooks and measured part (`client`), run in this process
(`closed_loop`, a conversation's turns as one session in `sessions`) or fanned out over several
(`fan_out`, how many: `processes`), one request over a connection (`request`, sockets in
`wire`), bytes -> events -> a record (`sse`, `records`; two runs' records paired there too),
records -> metrics (`metrics`), prompts (`datasets`, their records and error in `prompts`;
arrival traces read, cut and filled with real text in `traces`), the command line a cell's load
equals (`command`) and the progress line
(`progress`)."""
