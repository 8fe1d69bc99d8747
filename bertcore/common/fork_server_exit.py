"""Imported by a fork server alone, last of its preloaded modules (`fork_server.fork_server`):
when its stage ends, the server ends at once, without tearing down the libraries it imported
(torch, scikit-learn: over a second, during which it still holds the stage's stdout and stderr,
so that a caller reading them, a pipe or `subprocess.run`, waits for it). It has nothing to
flush or close: it writes nothing, and its workers end by `os._exit` already, as
multiprocessing ends every process it forks from there."""

import atexit
import os

atexit.register(os._exit, 0)  # registered last, so it runs first
