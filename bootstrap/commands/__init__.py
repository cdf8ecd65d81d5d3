"""One module per CLI verb: `configure(parser)` and `run(args) -> int`; `signals` is what the
long-running verbs (bench, monitor) share."""
