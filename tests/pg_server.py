"""A throwaway PostgreSQL server (Debian's binaries) in a temporary directory, on a free port.

initdb refuses to run as root, so as root the server runs as the ``postgres`` user, with its
data in a directory that user owns.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} not found: ./test installs Debian's postgresql package")
    return found[-1]


class PostgresServer:
    def __init__(self, **settings: object) -> None:
        """``settings``: extra server settings (``wal_level="logical"`` for change data capture)."""
        self.settings = settings
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="samsa-pg-", dir="/tmp")
        self.as_root = os.geteuid() == 0
        self.user = "postgres" if self.as_root else pwd.getpwuid(os.geteuid()).pw_name
        if self.as_root:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def _run(self, *args: str) -> None:
        cmd = (["runuser", "-u", "postgres", "--"] if self.as_root else []) + list(args)
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    def start(self) -> "PostgresServer":
        data = os.path.join(self.dir, "data")
        self._run(_bin("initdb"), "-D", data, "-A", "trust", "-U", self.user, "--no-sync")
        self._run(_bin("pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "server.log"), "-w", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
                  + "".join(f" -c {k}={v}" for k, v in self.settings.items()), "start")
        return self

    def stop(self) -> None:
        """Stops this server only (its own data directory), then removes the directory."""
        try:
            self._run(_bin("pg_ctl"), "-D", os.path.join(self.dir, "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
