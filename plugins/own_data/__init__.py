"""Your own data in one flag: ``clbench run --stream arrays|jsonl --data-dir DIR`` (see :mod:`.streams`)."""
