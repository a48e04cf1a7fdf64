"""The local driver JVM's class-data-sharing archive (``spark.class_archive``): made once, mapped by every
later local session, ignored when absent or turned off."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from incsync.spark import class_archive
from incsync.spark.session import spark_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(class_archive.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(class_archive.SWITCH_ENV, raising=False)
    monkeypatch.setattr(class_archive, "_started_here", False)
    return tmp_path / "cache"


def _java_options(conf: dict[str, str]) -> str:
    return conf.get("spark.driver.extraJavaOptions", "")


def test_no_archive_no_option_and_the_log4j_setting_stays(cache: Path) -> None:
    path = class_archive.archive_path()
    assert path is not None and path.parent == cache / "spark-classes" and path.suffix == ".jsa"
    assert class_archive.java_options() == ""
    options = _java_options(spark_config())
    assert "SharedArchiveFile" not in options and options.startswith("-Dlog4j2.configurationFile=file:")


def test_an_archive_is_mapped_by_local_drivers_only_and_can_be_turned_off(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = class_archive.archive_path()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"x")
    expected = f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert class_archive.java_options() == expected
    assert _java_options(spark_config()).endswith(" " + expected)
    assert _java_options(spark_config({"spark.master": "spark://h:7077"})).endswith(" " + expected)  # client-mode driver
    assert "spark.driver.extraJavaOptions" not in spark_config({"spark.remote": "sc://localhost:15002"})
    monkeypatch.setenv(class_archive.SWITCH_ENV, "off")
    assert class_archive.java_options() == "" and "SharedArchiveFile" not in _java_options(spark_config())


def test_the_archive_is_named_after_java_and_pyspark(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = class_archive.archive_path()
    fake = cache / "jdk" / "bin" / "java"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(cache / "jdk"))
    assert class_archive.archive_path() not in (None, first)
    monkeypatch.setenv("JAVA_HOME", str(cache / "no-such-jdk"))
    assert class_archive.archive_path() is None and class_archive.java_options() == ""
    assert class_archive.ensure_building() is False


def test_one_builder_at_a_time_and_a_dead_ones_lock_expires(cache: Path) -> None:
    lock = cache / "x.building"
    cache.mkdir(parents=True)
    assert class_archive._take(lock) is True
    assert lock.read_text() == str(os.getpid())
    assert class_archive._take(lock) is False  # another builder is at work
    old = time.time() - class_archive.STALE_BUILD_SECONDS - 60
    os.utime(lock, (old, old))
    assert class_archive._take(lock) is True  # that one died: its lock is taken over


def test_a_failed_build_is_not_retried_for_a_day_and_a_running_one_is_left_alone(cache: Path) -> None:
    path = class_archive.archive_path()
    path.parent.mkdir(parents=True)
    path.with_suffix(".failed").write_text("RuntimeError: no\n")
    assert class_archive.ensure_building() is False
    path.with_suffix(".failed").unlink()
    path.with_suffix(".building").write_text("1")
    assert class_archive.ensure_building() is False
    assert not path.exists()


def test_a_new_archive_removes_other_installs_archives_once_they_are_a_week_old(tmp_path: Path) -> None:
    from incsync.spark.class_archive_build import OLD_ARCHIVE_SECONDS, remove_old_archives

    now = time.time()
    names = ["driver-new.jsa", "driver-recent.jsa", "driver-old.jsa", "driver-old.failed"]
    for name in names:
        (tmp_path / name).write_text("x")
    week_ago = now - OLD_ARCHIVE_SECONDS - 60
    for name in ("driver-new.jsa", "driver-old.jsa", "driver-old.failed"):
        os.utime(tmp_path / name, (week_ago, week_ago))
    assert remove_old_archives(tmp_path, keep=tmp_path / "driver-new.jsa", now=now) == ["driver-old.jsa"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["driver-new.jsa", "driver-old.failed", "driver-recent.jsa"]


@pytest.mark.slow  # ~38 s (a JVM that dumps 170 MB of classes, then another): make test-long; in make test the
# suite's own runs make this install's archive in the background and later JVMs map it
def test_a_built_archive_is_mapped_by_the_next_local_session(cache: Path) -> None:
    """The real thing: the builder makes the archive; a new local session maps it (``-Xshare:on`` makes the
    JVM refuse to start if it cannot) and loads Spark's own classes from it."""
    env = {**os.environ, class_archive.CACHE_ENV: str(cache), class_archive.SWITCH_ENV: "auto"}
    path = class_archive.archive_path()
    build = subprocess.run([sys.executable, "-m", "incsync.spark.class_archive_build", str(path)], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, (build.stderr[-3000:], sorted(p.name for p in path.parent.iterdir()))
    assert path.is_file() and path.stat().st_size > 10_000_000
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no lock, no partial file, no failure
    script = (
        "from pyspark.sql import SparkSession\n"
        "from incsync.spark.session import spark_config\n"
        "conf = spark_config()\n"
        "conf['spark.driver.extraJavaOptions'] += ' -Xshare:on -Xlog:class+load=info'\n"
        "b = SparkSession.builder\n"
        "for k, v in conf.items():\n"
        "    b = b.config(k, v)\n"
        "s = b.getOrCreate()\n"
        "print('rows', s.range(7).count(), flush=True)\n"
        "s.stop()\n"
    )
    run = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    assert "rows 7" in run.stdout
    shared = [line for line in run.stdout.splitlines() if "org.apache.spark.SparkContext " in line]
    assert shared and "source: shared objects file (top)" in shared[0], shared


def test_the_local_driver_runs_the_serial_collector(spark) -> None:
    """The driver JVM's collector is the serial one (session.DRIVER_GC): under G1 a long staging task grew
    the heap toward its cap with the tenant's size (issue 46). A config's own extraJavaOptions replace it."""
    assert "-XX:+UseSerialGC" in _java_options(spark_config())
    assert "-XX:+UseSerialGC" not in _java_options(spark_config({"spark.driver.extraJavaOptions": "-Dx=1"}))
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()  # noqa: SLF001 - py4j
    assert sorted(bean.getName() for bean in beans) == ["Copy", "MarkSweepCompact"]
