"""The `kmon` command line, the top floor: it parses arguments, loads the configuration
and starts a command from any floor below (the application in kmon/, the demo, the matrix,
reports). Nothing imports it; `python -m cli` or the installed `kmon` script runs it."""
