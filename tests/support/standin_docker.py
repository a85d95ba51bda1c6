"""STAND-IN for the `docker` client, for tests only: this machine has the docker client but no
engine. Installed first on PATH as `docker`, it records every call (one JSON line each in
$STANDIN_DOCKER_STATE/calls.jsonl) and behaves like docker enough to be driven:

- `run [-d] [opts] IMAGE ARGS...`: runs the image's entrypoint (from images.json in the state
  folder) in its own session, like a container the client does not own; `-v HOST:CTR[:ro]`
  mounts become path rewrites, `-p [IP:]HPORT:CPORT` rewrites `--host 0.0.0.0` / `--port CPORT`
  (no network namespace here), `-e` sets the environment. Attached runs stream the log and proxy
  SIGTERM/SIGINT like `--sig-proxy`; killing the client leaves the "container" running.
- `inspect -f {{.State.Running}}|{{.Image}} NAME`, `image inspect --format {{json .}} IMAGE`,
  `pull IMAGE`, `logs -f NAME`, `rm -f NAME` (kills the container's process group), `ps`
  (the running containers' names, one a line; its options are ignored).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE = Path(os.environ["STANDIN_DOCKER_STATE"])
VALUE_OPTIONS = {"--gpus", "-p", "-v", "-e", "--name", "--shm-size", "--entrypoint", "--ipc"}


def _images() -> dict:
    path = STATE / "images.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _save_images(images: dict) -> None:
    (STATE / "images.json").write_text(json.dumps(images))


def _container(name: str) -> dict | None:
    path = STATE / "containers" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _no_such(kind: str, name: str) -> int:
    print(f"Error response from daemon: No such {kind}: {name}", file=sys.stderr)
    return 1


def cmd_run(args: list[str]) -> int:
    opts: dict[str, list[str]] = {}
    flags: set[str] = set()
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if "=" in arg:
            key, value = arg.split("=", 1)
            opts.setdefault(key, []).append(value)
        elif arg in VALUE_OPTIONS:
            opts.setdefault(arg, []).append(args[i + 1])
            i += 1
        else:
            flags.add(arg)
        i += 1
    image, command = args[i], args[i + 1 :]
    images = _images()
    if image not in images or not images[image].get("present", True):
        print(f"Unable to find image '{image}' locally", file=sys.stderr)
        return 125
    name = (opts.get("--name") or [f"standin-{os.getpid()}"])[0]
    old = _container(name)
    if old is not None:
        print(f'Conflict. The container name "/{name}" is already in use', file=sys.stderr)
        return 125
    mounts = []
    for spec in opts.get("-v", []):
        host, inside = spec.split(":")[:2]
        mounts.append((inside, host))
    mounts.sort(key=lambda m: -len(m[0]))

    def rewrite(token: str) -> str:
        for inside, host in mounts:
            if token == inside or token.startswith(inside + "/"):
                return host + token[len(inside) :]
        return token

    argv = [rewrite(t) for t in images[image]["entrypoint"] + command]
    for publish in opts.get("-p", []):
        parts = publish.split(":")
        ip, host_port, inner_port = ["0.0.0.0", *parts] if len(parts) == 2 else parts
        for j in range(len(argv) - 1):
            if argv[j] == "--host" and argv[j + 1] == "0.0.0.0":
                argv[j + 1] = ip
            if argv[j] == "--port" and argv[j + 1] == inner_port:
                argv[j + 1] = host_port
    env = dict(os.environ)
    for item in opts.get("-e", []):
        key, _, value = item.partition("=")
        env[key] = value if _ else os.environ.get(key, "")
    (STATE / "containers").mkdir(exist_ok=True)
    log_path = STATE / "containers" / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    record = {"pid": proc.pid, "image": image, "log": str(log_path), "argv": argv}
    (STATE / "containers" / f"{name}.json").write_text(json.dumps(record))
    if "-d" in flags:
        print(f"{proc.pid:064x}")
        return 0

    def proxy(signum, frame):
        os.killpg(proc.pid, signum)

    signal.signal(signal.SIGTERM, proxy)
    signal.signal(signal.SIGINT, proxy)
    return _follow(log_path, lambda: proc.poll() is None) or (proc.wait() or 0)


def _follow(log_path: Path, alive) -> int:
    with open(log_path, "rb") as log:
        while True:
            chunk = log.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            if not alive():
                sys.stdout.buffer.write(log.read())
                sys.stdout.flush()
                return 0
            time.sleep(0.05)


def cmd_logs(args: list[str]) -> int:
    name = args[-1]
    info = _container(name)
    if info is None:
        return _no_such("container", name)
    if "-f" not in args:
        sys.stdout.buffer.write(Path(info["log"]).read_bytes())
        return 0
    return _follow(Path(info["log"]), lambda: _running(info["pid"]))


def cmd_inspect(args: list[str]) -> int:
    fmt, name = args[args.index("-f") + 1], args[-1]
    info = _container(name)
    if info is None:
        print(f"Error: No such object: {name}", file=sys.stderr)
        return 1
    if fmt == "{{.State.Running}}":
        print("true" if _running(info["pid"]) else "false")
    elif fmt == "{{.Image}}":
        print(_images()[info["image"]]["id"])
    elif fmt == "{{.State.Pid}}":
        print(info["pid"] if _running(info["pid"]) else 0)
    else:
        print(json.dumps(info))
    return 0


def cmd_image(args: list[str]) -> int:
    image = args[-1]
    entry = _images().get(image)
    if args[0] != "inspect" or entry is None or not entry.get("present", True):
        print(f"Error: No such image: {image}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "Id": entry["id"],
                "RepoDigests": entry.get("digests", []),
                "Created": "2026-10-01T00:00:00Z",
                "Architecture": "amd64",
                "Config": {"Labels": entry.get("labels", {})},
            }
        )
    )
    return 0


def cmd_pull(args: list[str]) -> int:
    images = _images()
    if args[-1] not in images:
        print(f"Error response from daemon: pull access denied for {args[-1]}", file=sys.stderr)
        return 1
    images[args[-1]]["present"] = True
    _save_images(images)
    print(f"Status: Downloaded newer image for {args[-1]}")
    return 0


def cmd_rm(args: list[str]) -> int:
    name = args[-1]
    info = _container(name)
    if info is None:
        return _no_such("container", name)
    if _running(info["pid"]):
        if "-f" not in args:
            print("You cannot remove a running container", file=sys.stderr)
            return 1
        with contextlib.suppress(ProcessLookupError):
            os.killpg(info["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _running(info["pid"]) and time.monotonic() < deadline:
            time.sleep(0.02)
    (STATE / "containers" / f"{name}.json").unlink()
    print(name)
    return 0


def cmd_ps(args: list[str]) -> int:
    folder = STATE / "containers"
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if _running(json.loads(path.read_text())["pid"]):
            print(path.stem)
    return 0


def main() -> int:
    args = sys.argv[1:]
    with open(STATE / "calls.jsonl", "a") as calls:
        calls.write(json.dumps(args) + "\n")
    commands = {
        "run": cmd_run,
        "logs": cmd_logs,
        "inspect": cmd_inspect,
        "image": cmd_image,
        "pull": cmd_pull,
        "rm": cmd_rm,
        "ps": cmd_ps,
    }
    if not args or args[0] not in commands:
        print(f"standin docker: unsupported command {args[:1]}", file=sys.stderr)
        return 2
    return commands[args[0]](args[1:])


if __name__ == "__main__":
    sys.exit(main())
