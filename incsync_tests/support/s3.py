"""An S3-compatible server (moto) the test session starts on a free port and stops after.

Tests get a fresh bucket each and the ``storage_options`` that reach it; the secret key is passed the way
a config file must pass it, as the name of an environment variable.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from incsync_tests.support.host import in_ci

SECRET_VAR = "INCSYNC_TEST_S3_SECRET"
SECRET = "moto-secret-key"


@dataclass(frozen=True)
class S3Server:
    endpoint: str

    def options(self) -> dict[str, str]:
        """storage_options as a config file writes them (the secret by its variable's name)."""
        return {
            "aws_access_key_id": "testing",
            "aws_secret_access_key_env": SECRET_VAR,
            "aws_region": "us-east-1",
            "aws_endpoint_url": self.endpoint,
            "aws_allow_http": "true",
        }

    def bucket(self) -> str:
        """A new, empty bucket."""
        import pyarrow.fs as pafs

        name = f"incsync-{uuid.uuid4().hex[:12]}"
        host = self.endpoint.split("://", 1)[1]
        fs = pafs.S3FileSystem(
            access_key="testing", secret_key=SECRET, region="us-east-1", endpoint_override=host, scheme="http",
            allow_bucket_creation=True,
        )
        fs.create_dir(name)
        return name


def start_s3_server(log_file: Path) -> Iterator[S3Server]:
    """moto's server in a process of its own: delta-rs holds the GIL in some calls (``history``), which
    would starve a server thread in this process."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        if in_ci():
            pytest.fail("moto[server] is not installed (pip install -e '.[test]'); CI=true: S3 tests must run")
        pytest.skip("moto[server] is not installed (pip install -e '.[test]')")
    from incsync_tests.support.host import free_port

    port = free_port()
    with open(log_file, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while not _port_open(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto's S3 server did not start on port {port}: see {log_file}")
            time.sleep(0.1)
        yield S3Server(endpoint=f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0
