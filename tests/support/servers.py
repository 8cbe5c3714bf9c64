"""PostgreSQL and Redis servers of the distributed deployment test, from the Debian packages.

Each test starts its own instance on a free port with a data directory of its own, never the system
service (scripts/test.sh installs the packages on a fresh machine). PostgreSQL refuses to run as
root, so under root (CI) its processes run as the ``postgres`` user the Debian package creates, in a
directory made for that user. Only the processes started here are stopped here, by their handle.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt_testkit.spark_cluster import free_port

#: Set to skip the deployment test on a machine without the Debian packages (scripts/test.sh installs them).
SKIP_VARIABLE = "CKPT_SKIP_DEPLOYMENT"


def postgres_bin() -> Path | None:
    """The newest PostgreSQL server's ``bin`` directory of the Debian packages (not on the PATH there)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def missing_servers() -> list[str]:
    """The Debian packages the deployment test needs that are not installed."""
    missing = [] if postgres_bin() is not None else ["postgresql"]
    return missing + ([] if shutil.which("redis-server") else ["redis-server"])


def _stop(process: subprocess.Popen[bytes] | None, timeout: float = 30) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_for(what: str, ready: Any, process: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready after {timeout:.0f} s:\n{log.read_text(errors='replace')[-3000:]}")


@dataclass
class PostgresServer:
    """One PostgreSQL cluster (``initdb``) with a database ``airflow`` owned by the trusted user ``airflow``."""

    port: int = 0
    directory: Path = field(default_factory=lambda: Path("."))
    _process: subprocess.Popen[bytes] | None = None

    @property
    def sqlalchemy_url(self) -> str:
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    @property
    def celery_result_backend(self) -> str:
        return f"db+postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    def start(self, timeout: float = 120) -> PostgresServer:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql; scripts/test.sh does)")
        # /tmp, not pytest's tmp_path: that is private to root, and the server may run as another user.
        self.directory = Path(tempfile.mkdtemp(prefix="ckpt-postgres-"))
        run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.directory, user.pw_uid, user.pw_gid)
            run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        data = self.directory / "data"
        log = self.directory / "server.log"
        initdb = subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data),
                "-U",
                "airflow",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.directory,
            **run_as,
        )
        if initdb.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{initdb.stdout[-2000:]}\n{initdb.stderr[-2000:]}")
        self.port = free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.directory),
            "max_connections": "200",
            # A test's database: nothing here must survive a crash of the machine.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        argv = [str(bin_dir / "postgres"), "-D", str(data), "-p", str(self.port)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        with open(log, "wb") as output:
            self._process = subprocess.Popen(
                argv, stdout=output, stderr=subprocess.STDOUT, cwd=self.directory, **run_as
            )

        def accepts() -> bool:
            import psycopg2

            try:
                psycopg2.connect(host="127.0.0.1", port=self.port, user="airflow", dbname="postgres").close()
            except psycopg2.OperationalError:
                return False
            return True

        try:
            _wait_for("postgres", accepts, self._process, log, timeout)
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self

    def _create_database(self) -> None:
        import psycopg2

        connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="airflow", dbname="postgres")
        connection.autocommit = True  # CREATE DATABASE runs outside a transaction
        try:
            with connection.cursor() as cursor:
                cursor.execute("CREATE DATABASE airflow")
        finally:
            connection.close()

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg2

        with (
            contextlib.closing(
                psycopg2.connect(host="127.0.0.1", port=self.port, user="airflow", dbname="airflow")
            ) as connection,
            connection.cursor() as cursor,
        ):
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def stop(self) -> None:
        _stop(self._process)  # SIGTERM: a "smart" shutdown once the clients are gone
        if self.directory != Path("."):
            shutil.rmtree(self.directory, ignore_errors=True)


@dataclass
class RedisServer:
    """One ``redis-server`` on loopback, without persistence (the Celery broker of one test)."""

    directory: Path
    port: int = 0
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 60) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server; scripts/test.sh does)")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        log = self.directory / "redis.log"
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        argv += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"]
        with open(log, "wb") as output:
            self._process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)

        def answers() -> bool:
            import redis

            try:
                return bool(redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1).ping())
            except redis.RedisError:
                return False

        _wait_for("redis-server", answers, self._process, log, timeout)
        return self

    def stop(self) -> None:
        _stop(self._process)


def worker_hostname() -> str:
    """``[core] hostname_callable`` of the deployment's Celery workers: each names itself, as separate
    hosts would (``CKPT_WORKER_HOSTNAME``), so a task instance's tries say which worker ran them."""
    return os.environ.get("CKPT_WORKER_HOSTNAME") or "localhost"
