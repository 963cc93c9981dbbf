"""`kmon demo`: a real local cluster, a workload, four faults caused for real, and the
capture/replay of their telemetry. Nothing else in kmon imports this package; only the
command line (cli/main.py) starts it.

- runner.py: the live demo's steps, in order, and its teardown.
- settings.py: its timings and the configuration it runs under.
- preflight.py: its error type, the checks before it starts, a clean slate.
- lock.py: one demo per work folder.
- console.py: numbered steps and notes.
- warmup.py: the healthy run, and waiting for the pipeline to keep up.
- cause.py: causing one fault and watching for the findings that show it.
- outcomes.py: the findings as they appear, and each fault's outcome.
- actions.py: what the decision step did about each fault's findings.
- summary.py: the summary table.
- replay.py: `--capture` and `--replay`.
- workload.py: producers and consumer groups the faults disturb.
- faults/: one module per fault.
- capture/: the recorded telemetry `kmon demo --replay` feeds through the pipeline.
"""
