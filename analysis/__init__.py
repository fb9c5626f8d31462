"""The reading side: a finished run folder -> DataFrames on one clock (results) -> metrics per iteration
(metrics, iterations, measures), the fidelity verdict, the report, plots and the interactive view. It imports
nothing of the side that runs a network (experiments/, topologies/, workloads/, the controller's I/O):
tests/analysis/test_reading_side.py holds it to that."""
