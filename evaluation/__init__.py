"""The detectors' side of kmon: what they judge, read from the lake, and their evaluation.

- inputs/: every detector input read from the Delta tables (DuckDB over delta-rs, in the
  detector's own process, no JVM), one module per detector's inputs.
- detect.py: one evaluation (read, run every detector of detectors/registry.py, the
  findings' lifecycle and correlation, gold.anomalies), replays, and the detector query
  that evaluates on every trigger.
- slow_requests.py: the slow requests the agents kept whole, in slow-broker evidence.
- config.py: the configuration sections an evaluation needs.

jobs/ (the streaming pipeline) never imports this package; it imports jobs/ for the few
pieces both share (the write-behind thread, the silver commits a tick waits for).
"""
