"""What a latency goal and a fidelity goal both judge with, below slo/, fidelity/ and outputs/
(it imports only the load client's percentile, one definition of it): distribution-free bounds
on a percentile and a fraction, Wilson's and Clopper-Pearson's intervals (`bounds`), the
pass / fail / unresolved word and the rules that give it from a bound (`verdict`), and several
verdicts read as one family, Holm's step-down and the exact stratified test across a series'
points (`families`), for the sweeps' and fidelity's verdicts alike. Stdlib only."""
