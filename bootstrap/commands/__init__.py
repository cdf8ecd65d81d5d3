"""One module per CLI verb: `configure(parser)` and `run(args) -> int`."""
