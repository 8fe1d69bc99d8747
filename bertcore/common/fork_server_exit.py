"""Imported by a fork server alone, first of its preloaded modules (`fork_server.fork_server`):
on Linux, the kernel kills the server the moment its stage ends (PR_SET_PDEATHSIG,
`interrupt.signal_when_parent_dies`), even while it is still importing torch for a stage that
stopped at once on a bad input, and without the teardown of the libraries it imported (torch,
scikit-learn: over a second, during which it would still hold the stage's stdout and stderr, so
that a caller reading them, a pipe or `subprocess.run`, waits for it). It has nothing to flush
or close: it writes nothing, and its workers end by `os._exit`, as multiprocessing ends every
process it forks there. Elsewhere, it ends as Python's server does: once its imports are done
and its stage's end has closed the pipe it watches."""

import os
import signal

from bertcore.common.fork_server import STAGE_PID
from bertcore.common.interrupt import signal_when_parent_dies

signal_when_parent_dies(signal.SIGKILL, int(os.environ.get(STAGE_PID, os.getppid())))
