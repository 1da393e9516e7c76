"""Python processes for the tests that start with TensorFlow and kbert already imported: `Popen` and `run` take
`subprocess`'s arguments, and a command `[sys.executable, "-c" CODE | "-m" MODULE | SCRIPT, ARGS...]` runs in a
child forked from a server that imported them once (one per pytest worker), instead of a fresh interpreter that
spends about 6 s of CPU importing TensorFlow. The child is a process of its own as a fresh one is (its own pid,
file descriptors, environment, working directory, argv, exit status and signals; `kill -9` and SIGTERM reach
it), whose TensorFlow has not started: nothing in the server creates a tensor, so devices, logical devices and
strategies are set up in the child.

What TensorFlow and Keras read when they are imported comes from the server's environment, so a command whose
environment differs there (`IMPORT_TIME`), that runs another Keras backend, or that passes interpreter options
(`-I`), runs as a plain subprocess. `KBERT_TEST_FORKSERVER=0` runs every command so. A child that imports this
module asks the same server (`SOCKET_VARIABLE`), so a program run so can start its own processes so too; in a child
whose environment sets `FORK_SUBPROCESSES` to 1, `subprocess.Popen` (and so `subprocess.run`) is this module's, so
a program that knows nothing of the server (a tool in tools/) starts its Python processes so, and they theirs.

    result = run([sys.executable, "-c", code, "arg"], env=cli_env(), capture_output=True, text=True)
    process = Popen(pretrain_command(config, model_dir), env=cli_env(), stdout=subprocess.PIPE, text=True)
"""

import atexit
import gc
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Read by TensorFlow, Keras, oneDNN or Python when they load: a child must share the server's.
IMPORT_TIME = (
    "KERAS_BACKEND",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_CPP_VMODULE",
    "TF_ENABLED_DEVICE_TYPES",
    "TF_USE_LEGACY_KERAS",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "TF_ENABLE_ONEDNN_OPTS",
    "PYTHONHASHSEED",
    "PYTHONWARNINGS",
    "JAX_PLATFORMS",
)
_PRELOAD = ("tensorflow", "keras", "kbert.experiment")
SOCKET_VARIABLE = "KBERT_FORKSERVER_SOCKET"  # set in each child: its server's socket
FORK_SUBPROCESSES = "KBERT_TEST_FORK_SUBPROCESSES"  # "1": a child's subprocess.Popen is this module's
_plain_popen = subprocess.Popen  # the real one, should a caller put this module's Popen in its place


def server_environment() -> dict:
    """This process's environment for a kbert subprocess, the server's included: kbert importable, TF quiet, no
    inherited TF_CONFIG."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    env.pop("TF_CONFIG", None)
    return env


# -- the server --------------------------------------------------------------------------------------------------


def _send(conn: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def _receive(conn: socket.socket) -> dict | None:
    header = _read_exactly(conn, 4)
    if header is None:
        return None
    return json.loads(_read_exactly(conn, struct.unpack("!I", header)[0]))


def _read_exactly(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _child(request: dict, fds: list[int], inherited: list) -> None:
    """In the forked child: becomes the requested process, runs its program, exits with its status."""
    code = 1
    try:
        for held in inherited:  # the server's sockets and pipe
            held.close() if isinstance(held, socket.socket) else os.close(held)
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        if request["new_session"]:
            os.setsid()
        os.environ.clear()
        os.environ.update(request["env"], **{SOCKET_VARIABLE: request["socket"]})
        if request["env"].get(FORK_SUBPROCESSES) == "1":
            subprocess.Popen = Popen
        tempfile.tempdir = None  # found again from TMPDIR, as a fresh process does
        if "PYTHONUNBUFFERED" in request["env"]:
            sys.stdout.reconfigure(write_through=True)
            sys.stderr.reconfigure(write_through=True)
        kind, target, args = request["kind"], request["target"], request["args"]
        sys.argv = ["-c" if kind == "-c" else target, *args]
        sys.path[0] = {"-c": "", "-m": os.getcwd()}.get(kind) or os.path.dirname(os.path.abspath(target))
        pythonpath = request["env"].get("PYTHONPATH", "").split(os.pathsep)
        sys.path[1:1] = [path for path in pythonpath if path and path not in sys.path]
        if kind == "-c":
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        elif kind == "-m":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
        code = 0
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
        code = exit_.code if isinstance(exit_.code, int) else (exit_.code is not None)
    except BaseException:
        sys.excepthook(*sys.exc_info())
    finally:
        try:  # what the interpreter does on its way out
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(int(code) & 0xFF)


def serve(path: str) -> None:
    """Imports `_PRELOAD`, then forks a child for each request on the Unix socket `path` until its parent ends."""
    from kbert.runtime.console import quiet_environment

    quiet_environment([])  # as every kbert command does before it imports TensorFlow
    import importlib

    for name in _PRELOAD:
        importlib.import_module(name)
    from tensorflow.python.eager import context

    assert context.context()._context_handle is None, "TensorFlow started in the fork server"
    # What the imports made lives as long as the process: moved out of the collector's sight, it is not traversed by
    # every full collection in every child (about 0.5 CPU-s of a kbert-pretrain run's tracing, 500,000 objects).
    gc.freeze()
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    print("ready", flush=True)
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                header, fds, _, _ = socket.recv_fds(conn, 4, 3)
                size = struct.unpack("!I", header)[0]
                request = json.loads(_read_exactly(conn, size))
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request, fds, [listener, conn, wake_read, wake_write, *children.values()])
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                _send(conn, {"pid": pid})
            else:
                os.read(wake_read, 4096)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
                except OSError:
                    pass
                conn.close()
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)  # its parent ended (an xdist worker runs no atexit)


# -- the client --------------------------------------------------------------------------------------------------

_server: dict = {}
_lock = threading.Lock()


def _server_path() -> str | None:
    """The socket of this process's server, started on first use (a child's is its parent's); None where it cannot
    start."""
    with _lock:
        if "path" not in _server and os.environ.get(SOCKET_VARIABLE):
            _server.update(path=os.environ[SOCKET_VARIABLE], env=None)
        if "path" not in _server:
            folder = tempfile.mkdtemp(prefix="kbert_forkserver_")
            path = os.path.join(folder, "socket")
            log, env = open(os.path.join(folder, "server.log"), "w"), server_environment()
            process = _plain_popen(
                [sys.executable, os.path.abspath(__file__), path],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
            ready = process.stdout.readline().strip() == "ready"
            log.close()
            _server.update(path=path if ready else None, process=process, env=env)
            atexit.register(_stop, process, folder)
        return _server["path"]


def _stop(process: subprocess.Popen, folder: str) -> None:
    """At exit: ends the server and removes its socket and log."""
    process.kill()
    process.wait()
    shutil.rmtree(folder, ignore_errors=True)


def _forkable(args, options: dict) -> tuple[str, str, list[str]] | None:
    """(kind, target, args) of a command the server can run, or None."""
    if os.environ.get("KBERT_TEST_FORKSERVER", "1") == "0" or set(options) - {"start_new_session"}:
        return None
    if os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":  # the server would import kbert on it
        return None
    if not isinstance(args, (list, tuple)) or len(args) < 2 or args[0] != sys.executable:
        return None
    if args[1] in ("-c", "-m"):
        return (args[1], args[2], list(args[3:])) if len(args) > 2 else None
    if args[1].startswith("-"):
        return None
    return ("script", args[1], list(args[2:]))


def _environment_fits(env: dict) -> bool:
    """Whether `env` agrees with the server's on what TensorFlow, Keras and Python read when they load."""
    expected = _server.get("env") or server_environment()
    keys = [key for key in IMPORT_TIME if key != "TF_ENABLED_DEVICE_TYPES" or key in env]
    return all(env.get(key) == expected.get(key) for key in keys)


class ForkedProcess:
    """A child of the fork server, with the part of `subprocess.Popen`'s interface the tests use."""

    def __init__(self, conn: socket.socket, pid: int, args, stdin, stdout, stderr):
        self._conn, self.pid, self.args = conn, pid, args
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.setblocking(False)
            try:
                message = _receive(self._conn)
            except BlockingIOError:
                return None
            finally:
                self._conn.setblocking(True)
            self._ended(message)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                message = _receive(self._conn)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
            finally:
                self._conn.settimeout(None)
            self._ended(message)
        return self.returncode

    def _ended(self, message: dict | None) -> None:
        if message is None:
            raise RuntimeError(f"the fork server ended before {self.args[:3]} did")
        self.returncode = message["returncode"]
        self._conn.close()

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, input=None, timeout: float | None = None):
        """(stdout, stderr), read to their ends while `input` is written, then waits."""
        outputs: dict[str, list] = {}

        def read(name: str, stream) -> None:
            outputs[name] = [stream.read()]
            stream.close()

        readers = [
            threading.Thread(target=read, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        if self.stdin is not None:
            if input:
                try:
                    self.stdin.write(input)
                except BrokenPipeError:
                    pass
            self.stdin.close()
        deadline = None if timeout is None else time.time() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.time()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.time()))
        return outputs.get("stdout", [None])[0], outputs.get("stderr", [None])[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def _pipe_end(spec, reading: bool, text: bool):
    """(the child's fd, the parent's file or None, fds to close once sent) for one of stdin/stdout/stderr."""
    if spec == subprocess.PIPE:
        read_fd, write_fd = os.pipe()
        child, mine = (read_fd, write_fd) if reading else (write_fd, read_fd)
        mode = ("w" if reading else "r") + ("" if text else "b")
        return child, os.fdopen(mine, mode, **({"encoding": "utf-8"} if text else {"buffering": 0})), [child]
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDONLY if reading else os.O_WRONLY)
        return fd, None, [fd]
    if spec is None:
        return (0 if reading else 1), None, []
    fd = spec if isinstance(spec, int) else spec.fileno()
    return fd, None, []


def Popen(args, stdin=None, stdout=None, stderr=None, env=None, cwd=None, text=False, **options):
    """`subprocess.Popen(args, ...)`, in a child of the fork server where it can be (see the module's docstring)."""
    env = dict(os.environ if env is None else env)
    command = _forkable(args, options)
    path = _server_path() if command and _environment_fits(env) else None
    if path is None:
        return _plain_popen(args, stdin=stdin, stdout=stdout, stderr=stderr, env=env, cwd=cwd, text=text, **options)
    new_session = bool(options.get("start_new_session"))
    return _fork(path, command, args, stdin, stdout, stderr, env, cwd, text, new_session)


def _fork(
    path: str, command: tuple, args, stdin, stdout, stderr, env: dict, cwd, text: bool, new_session: bool
) -> ForkedProcess:
    """Asks the server at `path` for a child running `command` (`_forkable`); tests/conftest.py guards this as it
    guards `subprocess.Popen`."""
    ends = [_pipe_end(stdin if stdin is not None else subprocess.DEVNULL, True, text), _pipe_end(stdout, False, text)]
    ends.append(ends[1][:1] + (None, []) if stderr == subprocess.STDOUT else _pipe_end(stderr, False, text))
    kind, target, rest = command
    request = {
        "socket": path,
        "kind": kind,
        "target": target,
        "args": rest,
        "env": env,
        "cwd": os.path.abspath(cwd or os.getcwd()),
        "new_session": new_session,
    }
    data = json.dumps(request).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    socket.send_fds(conn, [struct.pack("!I", len(data))], [end[0] for end in ends])
    conn.sendall(data)
    for _, _, to_close in ends:
        for fd in to_close:
            os.close(fd)
    started = _receive(conn)
    assert started is not None, "the fork server did not start the command"
    return ForkedProcess(conn, started["pid"], args, *(end[1] for end in ends))


def run(args, input=None, capture_output=False, timeout=None, check=False, stdout=None, stderr=None, **kwargs):
    """`subprocess.run(args, ...)`, in a child of the fork server where it can be."""
    if capture_output:
        stdout = stderr = subprocess.PIPE
    stdin = subprocess.PIPE if input is not None else kwargs.pop("stdin", None)
    process = Popen(args, stdin=stdin, stdout=stdout, stderr=stderr, **kwargs)
    try:
        out, err = process.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    result = subprocess.CompletedProcess(args, process.returncode, out, err)
    if check:
        result.check_returncode()
    return result


if __name__ == "__main__":
    serve(sys.argv[1])
