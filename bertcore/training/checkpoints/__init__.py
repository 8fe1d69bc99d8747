"""Pretraining's checkpoints: the folder's format, when the loop writes one, and which ones a
run resumes, keeps or replaces."""
