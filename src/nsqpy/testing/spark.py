"""A Spark standalone cluster from the pyspark package, for tests and benches.

``StandaloneSpark(directory, workers=2)`` starts Spark's own master and workers
(``spark-class org.apache.spark.deploy.master.Master`` / ``...deploy.worker.Worker``, the
classes ``start-master.sh`` runs) as processes of their own on free loopback ports, each
logging to a file under ``directory``; ``submit`` runs ``spark-submit --master
spark://...`` as a user would; ``close`` kills them all (and each dies with the process
that started it). The JVMs start with the client JIT only, which halves their start on a
small machine, and keep their temporary files under ``directory``. Imports the standard
library and the test kit; never pyspark (the package is found by its path).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from nsqpy.testing.processes import die_with_parent, free_ports

QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def jvm_tmp(directory: Path) -> str:
    """The JVM flag that puts its temporary files (Spark's scratch folders, the native
    libraries its codecs unpack) under ``directory`` (made) instead of /tmp, where a JVM
    that is killed leaves them."""
    directory.mkdir(parents=True, exist_ok=True)
    return f"-Djava.io.tmpdir={directory}"


def java_tool_options(directory: Path) -> str:
    """``JAVA_TOOL_OPTIONS`` for every JVM started with it (Spark's daemons, drivers,
    executors): this environment's own, then ``jvm_tmp(directory)``."""
    return " ".join(filter(None, [os.environ.get("JAVA_TOOL_OPTIONS"), jvm_tmp(directory)]))


def spark_home() -> Path:
    """The installed pyspark package, which is a whole SPARK_HOME (bin/, jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed (pip install 'nsqpy[spark]')")
    return Path(spec.origin).parent


class StandaloneSpark:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each."""

    def __init__(
        self,
        directory: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.home = spark_home()
        self.port, self.ui_port, *self.worker_ui_ports = free_ports(2 + workers)
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(directory / "logs"),
            "SPARK_DAEMON_JAVA_OPTS": QUICK_JVM,
            # (every JVM of the cluster and of its jobs: drivers, executors)
            "JAVA_TOOL_OPTIONS": java_tool_options(directory / "tmp"),
            **(env or {}),
        }
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, argv: Sequence[str]) -> None:
        log = open(self.directory / "logs" / f"{name}.log", "ab")  # noqa: SIM115 - closed by close()
        self._logs.append(log)
        command = [str(self.home / "bin" / "spark-class"), *argv]
        self.procs.append(subprocess.Popen(die_with_parent(command), env=self.env, stdout=log,
                                           stderr=log, stdin=subprocess.DEVNULL,
                                           start_new_session=True))  # fmt: skip

    def start(self, timeout: float = 90.0) -> StandaloneSpark:
        """Start the master and the workers; return once every worker is alive."""
        (self.directory / "logs").mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", ["org.apache.spark.deploy.master.Master", "--host",
                                   "127.0.0.1", "--port", str(self.port), "--webui-port",
                                   str(self.ui_port)])  # fmt: skip
            for k, ui in enumerate(self.worker_ui_ports):
                work = self.directory / f"worker{k}"
                work.mkdir(exist_ok=True)
                self._start(f"worker{k}", ["org.apache.spark.deploy.worker.Worker", "--host",
                                           "127.0.0.1", "--cores", str(self.cores), "--memory",
                                           self.memory, "--webui-port", str(ui), "--work-dir",
                                           str(work), self.master_url])  # fmt: skip
            deadline = time.monotonic() + timeout
            while self.state().get("aliveworkers") != self.workers:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.workers} Spark workers not alive in {timeout}s: "
                                       f"{self.log_tail('master')}")  # fmt: skip
                for proc in self.procs:
                    if proc.poll() is not None:
                        raise RuntimeError(f"a Spark daemon exited: {self.log_tail('master')}")
                time.sleep(0.5)
        except BaseException:
            self.close()
            raise
        return self

    def state(self) -> dict[str, Any]:
        """The master's own JSON (workers, applications), {} while it does not answer."""
        try:
            url = f"http://127.0.0.1:{self.ui_port}/json/"
            with urllib.request.urlopen(url, timeout=2) as answer:
                doc = json.loads(answer.read())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def submit(
        self,
        *args: str,
        timeout: float = 300,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``spark-submit --master spark://... args`` (client mode, in ``cwd``), run to its end."""
        command = [str(self.home / "bin" / "spark-submit"), "--master", self.master_url,
                   "--conf", f"spark.driver.extraJavaOptions={QUICK_JVM}",
                   "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}",
                   "--conf", "spark.ui.enabled=false", *args]  # fmt: skip
        return subprocess.run(command, env={**self.env, **(env or {})}, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              cwd=cwd)  # fmt: skip

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = (self.directory / "logs" / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        for log in self._logs:
            log.close()
        self.procs.clear()
        self._logs.clear()

    def __enter__(self) -> StandaloneSpark:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
