"""A local Spark Connect server started from the pyspark install: keeps Spark warm across runs.

Transfers connect to it with ``spark: {spark.remote: "sc://127.0.0.1:<port>"}`` in the config file;
a run then pays a gRPC connection instead of a JVM start, which takes many times longer.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from incsync.errors import IncsyncError
from incsync.spark.cluster import cluster_problems, driver_address
from incsync.spark.session import JDBC_DRIVER_JARS

CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002


def spark_submit() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


def server_command(*, port: int, master: str = "local[*]", extra_conf: dict[str, str] | None = None) -> list[str]:
    """spark-submit arguments for a loopback-only Connect server with the OS's JDBC drivers.

    Its clients connect on 127.0.0.1; its driver is on loopback too unless ``master`` runs executors on
    other machines, where ``extra_conf`` names ``spark.driver.host`` / ``spark.driver.bindAddress``.
    """
    conf = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        **driver_address({"spark.master": master, **(extra_conf or {})}),
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}",
        **(extra_conf or {}),
    }
    command = [str(spark_submit()), "--class", CONNECT_SERVER_CLASS, "--master", master, "--name", "incsync-connect"]
    jars = [j for j in JDBC_DRIVER_JARS if Path(j).exists()]
    if jars:
        command += ["--jars", ",".join(jars)]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, "spark-internal"]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def start_server(*, port: int = DEFAULT_PORT, master: str = "local[*]", log_file: Path | None = None,
                 timeout: float = 180.0, extra_conf: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start the server in its own session and wait until its port answers."""
    if port_open(port):
        raise IncsyncError(f"port {port} on 127.0.0.1 is already in use; pick another with --port")
    if problems := cluster_problems({"spark.master": master, **(extra_conf or {})}):
        raise IncsyncError(problems[0])
    out = open(log_file, "ab") if log_file else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    command = server_command(port=port, master=master, extra_conf=extra_conf)
    process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,  # noqa: S603 - our spark-submit line, no shell
                               start_new_session=True, env={**os.environ, "SPARK_NO_DAEMONIZE": "1",
                                                            # its Python workers (staging to object stores) need our packages
                                                            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)})
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if process.poll() is not None:
            raise IncsyncError(f"the Spark Connect server exited with status {process.returncode}"
                               + (f"; see {log_file}" if log_file else "; run `incsync spark-server` to see why"))
        if time.monotonic() > deadline:
            stop_server(process)
            raise IncsyncError(f"the Spark Connect server did not open port {port} within {timeout:.0f} s")
        time.sleep(0.5)
    return process


def stop_server(process: subprocess.Popen[bytes], *, grace: float = 10.0) -> None:
    """End the server's whole session: Spark's Python workers leave the JVM's process group."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    finally:
        _kill_session(process.pid)


def _kill_session(sid: int) -> None:
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getsid(int(proc.name)) == sid:
                os.kill(int(proc.name), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


def remote_url(port: int = DEFAULT_PORT, *, session_id: str | None = None) -> str:
    """``sc://`` URL; a fixed session id keeps the server from starting Python workers per client."""
    url = f"sc://127.0.0.1:{port}"
    return f"{url}/;session_id={session_id}" if session_id else url
