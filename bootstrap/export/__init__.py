"""`export`: the environment.yml (or explicit files) to share with people who use plain conda.

Three sources, one set of portability rules (`portable`):

* a lock (`from_lock.export_env`): the spec's requested specs pinned to the
  locked versions, as a portable environment.yml;
* a lock, pinned (`from_lock.export_pinned`): the whole closure of each
  platform with hashes, exactly as `conda-lock render --kind explicit` writes it;
* an existing environment (`from_prefix.export_prefix`): its requested specs
  and pip distributions, pinned to what is installed.

`render` writes the two file formats; `result` holds what an export returns
and writes its files, all or none.
"""
