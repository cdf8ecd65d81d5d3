"""`export`: the environment.yml (or explicit files) to share with people who use plain conda.

From a lock (`from_lock`) or an existing env (`from_prefix`), one set of portability rules
(`portable`); `render` writes the formats, `result` writes every file or none.
Docs: docs/lock.md, "`environment.yml`: the export for plain conda".
"""
