"""tests/passes and its subfolders share helper modules (_dags.py, _event_oracle.py): this
conftest puts the folder on sys.path (pytest's default import mode adds a conftest's
folder), whichever tests are collected first."""
