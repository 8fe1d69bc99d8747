"""Pretraining's checkpoints: the folder's format, the run identity each records (what makes
two runs the same run), and which ones a run resumes, keeps or replaces."""
