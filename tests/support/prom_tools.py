"""Run the OS-packaged Prometheus and Alertmanager as child processes, and shape their configs.

The embedded default (one machine, tests, the demo) uses the Debian binaries:
``prometheus`` and ``promtool`` from the prometheus package, ``prometheus-alertmanager``
(``alertmanager`` on other distributions) and ``amtool`` from prometheus-alertmanager.
Each process gets its own work folder (config, data, log) and a loopback port, never the
packaged services' 9090/9093, and dies with its owner (PR_SET_PDEATHSIG) so a crashed test
leaves nothing running. `stop()` is safe to repeat.

    prom = start_prometheus(config_text, work_dir, port=0)   # 0: a free port
    ...  prom.url  ->  "http://127.0.0.1:41234"
    ...  prom.query('up == 1')  ->  [{"metric": {...}, "value": [t, "1"]}, ...]
    prom.stop()

Files the config refers to by a relative path (rule files) go in ``files``: they are
written next to the config, and Prometheus resolves relative paths from the config's folder.

The config helpers keep the shipped files (alerts/kmon-rules.yml, alerts/alertmanager.yml)
the single source: `alertmanager_config` swaps in the real webhook URLs (and, for tests,
short group timers); `rules_with_for` rewrites every alert's ``for:`` so an end-to-end test
need not wait minutes, while promtool tests the shipped durations.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ALERTS_DIR = REPO_ROOT / "alerts"
RULES_FILE = ALERTS_DIR / "kmon-rules.yml"
ALERTMANAGER_FILE = ALERTS_DIR / "alertmanager.yml"

PROMETHEUS_BINARIES = ("prometheus",)
ALERTMANAGER_BINARIES = ("prometheus-alertmanager", "alertmanager")  # Debian name first
PROMTOOL_BINARIES = ("promtool",)
AMTOOL_BINARIES = ("amtool",)


class PromToolsError(RuntimeError):
    """A binary is missing, or a process did not start or become ready; the message says why."""


def find_binary(names: tuple[str, ...]) -> str | None:
    """The first of `names` on PATH, None when none is installed."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class PromProcess:
    """A started Prometheus or Alertmanager: where it listens, where it writes, how to stop it."""
    name: str
    url: str
    port: int
    work_dir: Path
    log_path: Path
    proc: subprocess.Popen = field(repr=False)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def get_json(self, path: str, timeout: float = 5.0) -> Any:
        """GET url+path and decode the JSON answer (the HTTP APIs of both programs)."""
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def query(self, expr: str, timeout: float = 30.0) -> list:
        """Prometheus only: the result of an instant query of `expr` (a list of series for
        a vector). An expression Prometheus refuses raises PromToolsError with its reason."""
        path = "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            answer = self.get_json(path, timeout)
        except urllib.error.HTTPError as e:
            raise PromToolsError(f"Prometheus refused {expr!r}: "
                                 f"{e.read().decode(errors='replace')}") from None
        if answer.get("status") != "success":
            raise PromToolsError(f"Prometheus query {expr!r} failed: {answer}")
        return answer["data"]["result"]

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; safe to call again."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)

    def __enter__(self) -> "PromProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _launch(name: str, binaries: tuple[str, ...],
            args_for_port: Callable[[Path, Path, int], list[str]], config_name: str,
            config_text: str, work_dir: Path | str, port: int,
            files: Mapping[str, str] | None, ready_timeout: float) -> PromProcess:
    binary = find_binary(binaries)
    if binary is None:
        raise PromToolsError(f"{' or '.join(binaries)} not found on PATH: install the Debian "
                             f"package (./kmonw setup does it when run as root)")
    work = Path(work_dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    for rel, text in (files or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    config = work / config_name
    config.write_text(config_text)
    log_path = work / f"{name}.log"
    # With port 0 another process may take the free port before ours binds it: retry then.
    attempts = 3 if port == 0 else 1
    last = ""
    for _ in range(attempts):
        p = port or free_port()
        with open(log_path, "ab") as out:
            proc = subprocess.Popen([binary, *args_for_port(config, work, p)], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=work, start_new_session=True,
                                    preexec_fn=_die_with_parent)
        handle = PromProcess(name, f"http://127.0.0.1:{p}", p, work, log_path, proc)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline and handle.alive():
            if _ready(handle.url) and handle.alive():  # alive: not another program's port
                return handle
            time.sleep(0.2)
        last = handle.log_tail()
        handle.stop()
        if "address already in use" not in last:
            break
    raise PromToolsError(f"{name} did not become ready at port {p} within {ready_timeout:.0f}s; "
                         f"its log ({log_path}) ends:\n{last}")


def start_prometheus(config_text: str, work_dir: Path | str, port: int = 0, *,
                     files: Mapping[str, str] | None = None,
                     ready_timeout: float = 60.0) -> PromProcess:
    """Start Prometheus with `config_text` on 127.0.0.1:`port` (0: a free port), data and
    log in `work_dir`."""
    def args(config: Path, work: Path, p: int) -> list[str]:
        return [f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{p}", "--web.enable-lifecycle",
                "--log.level=info"]
    return _launch("prometheus", PROMETHEUS_BINARIES, args, "prometheus.yml", config_text,
                   work_dir, port, files, ready_timeout)


def start_alertmanager(config_text: str, work_dir: Path | str, port: int = 0, *,
                       ready_timeout: float = 60.0) -> PromProcess:
    """Start a single Alertmanager (gossip cluster off) on 127.0.0.1:`port` (0: a free port)."""
    def args(config: Path, work: Path, p: int) -> list[str]:
        return [f"--config.file={config}", f"--storage.path={work / 'data'}",
                f"--web.listen-address=127.0.0.1:{p}", "--cluster.listen-address=",
                "--log.level=info"]
    return _launch("alertmanager", ALERTMANAGER_BINARIES, args, "alertmanager.yml",
                   config_text, work_dir, port, None, ready_timeout)


# --- configs ---------------------------------------------------------------------------

def prometheus_config(*, scrape_targets: Mapping[str, list[str]], rule_files: Sequence[str] = (),
                      alertmanagers: Sequence[str] = (), scrape_interval: str = "15s",
                      evaluation_interval: str = "15s") -> str:
    """A Prometheus config: one job per `scrape_targets` key ("kmon": ["127.0.0.1:9400"])."""
    cfg: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval,
                   "evaluation_interval": evaluation_interval},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}
                           for job, targets in scrape_targets.items()],
    }
    if rule_files:
        cfg["rule_files"] = list(rule_files)
    if alertmanagers:
        cfg["alerting"] = {"alertmanagers": [
            {"static_configs": [{"targets": list(alertmanagers)}]}]}
    return yaml.safe_dump(cfg, sort_keys=False)


def alertmanager_config(webhook_urls: str | Mapping[str, str], *,
                        base_text: str | None = None,
                        route_timers: Mapping[str, str] | None = None) -> str:
    """The shipped alerts/alertmanager.yml with real webhook URLs.

    `webhook_urls` is one URL for every receiver, or receiver name -> URL (every receiver
    with a webhook must be named). `route_timers` overrides group_wait, group_interval or
    repeat_interval on the root route (tests shorten them).
    """
    cfg = yaml.safe_load(base_text if base_text is not None else ALERTMANAGER_FILE.read_text())
    for receiver in cfg.get("receivers", []):
        hooks = receiver.get("webhook_configs") or []
        if not hooks:
            continue
        name = receiver["name"]
        if isinstance(webhook_urls, str):
            url = webhook_urls
        elif name in webhook_urls:
            url = webhook_urls[name]
        else:
            raise PromToolsError(f"no webhook URL given for Alertmanager receiver {name!r}")
        for hook in hooks:
            hook["url"] = url
    for key, value in (route_timers or {}).items():
        if key not in ("group_wait", "group_interval", "repeat_interval"):
            raise PromToolsError(f"unknown route timer {key!r}")
        cfg["route"][key] = value
    return yaml.safe_dump(cfg, sort_keys=False)


def rules_with_for(rules_text: str, for_: str) -> str:
    """The rule file with every alert's `for:` (and `keep_firing_for:` where it has one)
    set to `for_` (e.g. "0s"): a test's compressed time; nothing else changes."""
    cfg = yaml.safe_load(rules_text)
    for group in cfg["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = for_
                if "keep_firing_for" in rule:
                    rule["keep_firing_for"] = for_
    return yaml.safe_dump(cfg, sort_keys=False)
