"""S3 identities on the SeaweedFS test server, granted and revoked while it runs.

SeaweedFS keeps dynamic identities in its filer (``weed shell`` command
``s3.configure … -apply``) and its S3 gateway picks up a change within a fraction
of a second, so a test can give a job its own access key and then delete that
identity mid-run: every later request signed with the key is refused with
``InvalidAccessKeyId`` (HTTP 403), exactly what a revoked IAM key does on AWS.
The static admin identity of the server (``identities.json``) is not touched.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from dataclasses import dataclass

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from ckpt_testkit.seaweed import SeaweedServer, find_weed


@dataclass(frozen=True)
class Identity:
    user: str
    access_key: str
    secret_key: str


class SeaweedIdentities:
    """Grant and revoke S3 identities on ``server`` (which must be running)."""

    def __init__(self, server: SeaweedServer, bucket: str) -> None:
        self.server = server
        self.bucket = bucket

    def _shell(self, command: str) -> None:
        assert self.server.ports is not None
        proc = subprocess.run(
            [find_weed(), "shell", f"-master=127.0.0.1:{self.server.ports['master']}"],
            input=command + "\nexit\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"weed shell {command!r} failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")

    def _client(self, identity: Identity) -> object:
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.server.endpoint_url,
            aws_access_key_id=identity.access_key,
            aws_secret_access_key=identity.secret_key,
            region_name=self.server.region,
            config=Config(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5),
        )

    def _accepted(self, identity: Identity) -> bool:
        try:
            self._client(identity).list_objects_v2(Bucket=self.bucket, MaxKeys=1)  # type: ignore[attr-defined]
            return True
        except ClientError:
            return False

    def grant(self, user: str) -> Identity:
        """A new identity with Read, Write and List; returns once the gateway accepts its key."""
        identity = Identity(user, "JOB" + secrets.token_hex(8).upper(), secrets.token_hex(20))
        self._shell(
            f"s3.configure -user={user} -access_key={identity.access_key} -secret_key={identity.secret_key} "
            "-actions=Read,Write,List -apply"
        )
        self._wait(identity, accepted=True)
        return identity

    def revoke(self, identity: Identity) -> None:
        """Delete the identity; returns once the gateway refuses its key."""
        self._shell(f"s3.configure -user={identity.user} -delete -apply")
        self._wait(identity, accepted=False)

    def _wait(self, identity: Identity, *, accepted: bool, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._accepted(identity) == accepted:
                return
            time.sleep(0.1)
        state = "accept" if accepted else "refuse"
        raise RuntimeError(f"SeaweedFS did not {state} the key of {identity.user} within {timeout}s")
