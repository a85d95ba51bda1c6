"""What a token costs in energy, read from the hardware's own counters; below `cell/` and
`outputs/`, beside `process/` (it imports neither, nor anything above it: the load client's
request record only).

The readers, thin: NVIDIA GPUs through NVML's total-energy counter and power readings
(`nvml`), CPU sockets through RAPL's powercap counters (`rapl`), what each source answers
and how one that cannot be read says why (`source`), the one way to open a source and take the
idle baseline (`meter`). The figures, pure: joules between two reads of a counter, wraps undone
(`counters`), power samples integrated by trapezoids with their stated error and a sampled
counter interpolated, and the counter checked against the samples (`samples`), the bench and
steady-state windows and their tokens (`windows`), the steady state's interval from time
slices (`interval`), a cell's record assembled (`figures`), the typed record and its
metrics.json shape, `not measured` with its reason (`record`).
"""
