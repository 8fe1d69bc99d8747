"""`bert compare`: the headline figures of two or more runs (each side one run or several
pretraining seeds) side by side, each with its 95% interval over its items, and each
difference to the first side with its own interval and verdict. Reads only the per-item
outcomes files (`common/outcomes.py`) of folders, git revisions and DVC experiments, and
MLflow runs.

sources.py (a folder, `mlflow:<run id>`, a git revision or DVC experiment -> its outcomes;
revisions.py: the git side) <- sides.py (one side: its seeds stacked) <- comparison.py (the
figures every side has, their intervals and differences) <- tables.py (the terminal's
tables), files.py (markdown and JSON) <- logged.py (the comparison as an MLflow run).
"""
