"""``samsa console`` in a child process, and where the browser test's screenshots go."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from broker_process import ROOT, free_port, wait_for_port

# Screenshots of each page the browser test visits (git-ignored); SAMSA_ARTIFACTS moves them.
ARTIFACTS = Path(os.environ.get("SAMSA_ARTIFACTS", ROOT / "tests" / "artifacts")) / "console"


class ConsoleProcess:
    """``samsa console`` in a child process on a free port."""

    def __init__(self, bootstrap: str, *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fd, self.log_path = tempfile.mkstemp(prefix=f"samsa-console-{self.port}-", suffix=".log")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "samsa.cli.main", "console", "--bootstrap-server", bootstrap,
             "--port", str(self.port), *args], stdout=fd, stderr=subprocess.STDOUT, cwd=ROOT)
        os.close(fd)
        wait_for_port(self.port, self.proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        Path(self.log_path).unlink(missing_ok=True)
