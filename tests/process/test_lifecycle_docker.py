"""Docker launches through a STAND-IN `docker` executable first on PATH (this machine has the
docker client but no engine): it records its arguments and runs the image's entrypoint like a
container the client does not own. Behind it runs the REAL llama-server, so readiness, liveness
(`docker inspect`), logs, teardown (`docker rm -f NAME`) and the image digest are exercised end
to end; no process may be left behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys

import pytest

from tests.support.engines import (
    NEVER_ANSWERS,
    docker_calls,
    install_standin_docker,
    left_behind,
    llama_server_binary,
    make_config,
    one_cell,
    smollm2_gguf,
    write_executable,
)
from workflow_scripts.cell.run import CellInputs, run_cell
from workflow_scripts.engines import adapter_for
from workflow_scripts.engines.command import cell_server_command, cell_weights
from workflow_scripts.engines.provision import provision
from workflow_scripts.process.ports import reserve_port
from workflow_scripts.process.server import ServerError, ServerProcess, running, wait_ready

pytestmark = pytest.mark.standin

FULL_CUDA = "ghcr.io/ggml-org/llama.cpp:full-cuda"
HANGS = "example/hangs:latest"
IMAGE_ID = "sha256:" + "1" * 64
PROBE = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    """The cached GGUF as a plain file in a folder of its own: mounted as /models, and a marker
    that tells this module's servers from anyone else's."""
    folder = tmp_path_factory.mktemp("docker-models")
    source = smollm2_gguf(folder)
    try:
        os.link(source, folder / "smollm2-docker.gguf")  # a plain file: one folder mount
    except OSError:
        shutil.copyfile(source, folder / "smollm2-docker.gguf")
    return folder


@pytest.fixture
def docker(tmp_path, monkeypatch):
    """The stand-in, with a `full-cuda` image whose entrypoint dispatches like llama.cpp's
    tools.sh, and an image whose server hangs at start."""
    tools = write_executable(
        tmp_path / "tools.sh",
        "#!/bin/sh\n"
        'if [ "$1" = "--server" ]; then shift; exec "' + llama_server_binary() + '" "$@"; fi\n'
        'echo "Unknown command: $1"; exit 1\n',
    )
    hang = tmp_path / "never_answers.py"
    hang.write_text(NEVER_ANSWERS)
    images = {
        FULL_CUDA: {
            "entrypoint": [str(tools)],
            "id": IMAGE_ID,
            "digests": [f"ghcr.io/ggml-org/llama.cpp@sha256:{'2' * 64}"],
            "labels": {"org.opencontainers.image.version": "b9744"},
        },
        HANGS: {"entrypoint": [sys.executable, str(hang)], "id": "sha256:" + "3" * 64},
    }
    return install_standin_docker(tmp_path, monkeypatch, images)


def docker_cell(
    weights_dir, image=FULL_CUDA, detach=False, model="smollm2-docker.gguf", **workload
):
    engine = {
        "kind": "llamacpp",
        "launch": "docker",
        "docker": {"image": image, "gpus": "all", "detach": detach},
        "settings": {"ctx_size": 512, "threads": 1, "port": 8081},
    }
    models = {
        "m": {"quants": {"q": {"weights": {"source": "local", "path": str(weights_dir / model)}}}}
    }
    return one_cell(
        make_config(
            {"gpu": engine},
            [{"model": "m", "engine": "gpu", "workload": "w"}],
            models=models,
            workload=workload or None,
        )
    )


def command_for(cell, port):
    weights, _ = cell_weights(cell, {"primary": cell.weights["path"]}, None)
    return cell_server_command(cell, adapter_for("llamacpp"), {}, weights, None, port)


@pytest.mark.parametrize("detach", [False, True])
def test_container_ready_then_removed_by_name(docker, weights_dir, tmp_path, detach):
    cell = docker_cell(weights_dir, detach=detach)
    with reserve_port(preferred=8081) as lease:
        command = command_for(cell, lease.port)
        server = ServerProcess.for_command(command, tmp_path / "server.log")
        with running(server):
            wait_ready(server, command.base_url, "/health", 60, PROBE)
            assert server.alive()
            assert left_behind(str(weights_dir), settle_s=0)
        calls = docker_calls(docker)
    name = command.container
    # a leftover of the same name is removed first, then the exact argv runs
    assert calls[0] == ["rm", "-f", name]
    (run,) = [call for call in calls if call[0] == "run"]
    assert run == command.argv[1:]
    assert run[:2] == (["run", "-d"] if detach else ["run", "--gpus"])
    assert f"127.0.0.1:{lease.port}:8081" in run
    assert f"{weights_dir}:/models:ro" in run
    assert ["inspect", "-f", "{{.State.Running}}", name] in calls
    if detach:
        assert ["logs", "-f", name] in calls
    assert calls[-1] == ["rm", "-f", name]
    assert "llama_server" in (tmp_path / "server.log").read_text()  # the container's own log
    assert left_behind(str(weights_dir)) == []


def test_killed_client_leaves_the_container_until_rm(docker, weights_dir, tmp_path):
    """As with real docker: killing the client does not stop the container; teardown by name
    does."""
    cell = docker_cell(weights_dir)
    with reserve_port() as lease:
        command = command_for(cell, lease.port)
        server = ServerProcess.for_command(command, tmp_path / "server.log")
        with running(server):
            wait_ready(server, command.base_url, "/health", 60, PROBE)
            os.killpg(server.pid, signal.SIGKILL)
            server.proc.wait(10)
            assert left_behind(str(weights_dir), settle_s=0)  # the "container" runs on
            with pytest.raises(ServerError, match="was killed by SIGKILL"):
                wait_ready(server, command.base_url, "/health", 60, PROBE)
    assert left_behind(str(weights_dir)) == []


def test_container_that_exits_fails_fast_with_its_log(docker, weights_dir, tmp_path):
    (weights_dir / "broken.gguf").write_bytes(os.urandom(4096))
    cell = docker_cell(weights_dir, detach=True, model="broken.gguf")
    with reserve_port() as lease:
        command = command_for(cell, lease.port)
        server = ServerProcess.for_command(command, tmp_path / "server.log")
        with running(server), pytest.raises(ServerError) as caught:
            wait_ready(server, command.base_url, "/health", 300, PROBE)
    message = str(caught.value)
    assert "container is not running" in message and "not ready after" not in message
    assert "broken.gguf" in message
    assert left_behind(str(weights_dir / "broken.gguf")) == []


def test_silently_hung_container_times_out_and_is_removed(docker, weights_dir, tmp_path):
    cell = docker_cell(weights_dir, image=HANGS)
    with reserve_port() as lease:
        command = command_for(cell, lease.port)
        server = ServerProcess.for_command(command, tmp_path / "server.log")
        with running(server), pytest.raises(ServerError, match="not ready after 2 s"):
            wait_ready(server, command.base_url, "/health", 2, PROBE)
    assert docker_calls(docker)[-1] == ["rm", "-f", command.container]
    assert left_behind(str(tmp_path / "never_answers.py")) == []


def test_leftover_container_of_a_killed_run_is_replaced(docker, weights_dir, tmp_path):
    cell = docker_cell(weights_dir)
    with reserve_port() as lease:
        command = command_for(cell, lease.port)
        leftover = ServerProcess(
            ["docker", "run", "-d", "--name", command.container, HANGS, "--port", "1"],
            tmp_path / "leftover.log",
        )
        leftover._start_detached()
        assert left_behind(str(tmp_path / "never_answers.py"), settle_s=0)
        server = ServerProcess.for_command(command, tmp_path / "server.log")
        with running(server):
            wait_ready(server, command.base_url, "/health", 60, PROBE)
        assert left_behind(str(tmp_path / "never_answers.py")) == []
    assert left_behind(str(weights_dir)) == []


def test_provision_pulls_a_missing_image_and_records_its_digest(docker):
    images = json.loads((docker / "images.json").read_text())
    images[FULL_CUDA]["present"] = False
    (docker / "images.json").write_text(json.dumps(images))
    stamp = provision(
        "gpu", {"kind": "llamacpp", "launch": "docker", "docker": {"image": FULL_CUDA}}
    )
    assert stamp["image_id"] == IMAGE_ID
    assert stamp["repo_digests"] == [f"ghcr.io/ggml-org/llama.cpp@sha256:{'2' * 64}"]
    assert stamp["pulled"] is True and stamp["version"] == "b9744"
    assert ["pull", FULL_CUDA] in docker_calls(docker)
    again = provision(
        "gpu", {"kind": "llamacpp", "launch": "docker", "docker": {"image": FULL_CUDA}}
    )
    assert again["pulled"] is False


def test_provision_names_an_image_that_cannot_be_pulled(docker):
    with pytest.raises(RuntimeError, match="docker pull nope/nope:1 failed"):
        provision("gpu", {"kind": "vllm", "launch": "docker", "docker": {"image": "nope/nope:1"}})


def test_run_cell_through_docker_end_to_end(docker, weights_dir, tmp_path):
    cell = docker_cell(weights_dir, num_prompts=3, concurrency=1, max_tokens=4)
    out = tmp_path / "cell"
    result = run_cell(
        CellInputs(
            cell=cell,
            out_dir=out,
            engine_info={"image": FULL_CUDA, "image_id": IMAGE_ID},
            weights_manifest={"primary": str(weights_dir / "smollm2-docker.gguf")},
        )
    )
    assert result["status"] == "done", result.get("reason")
    assert result["completed"] == 3
    assert result["server_command"][:2] == ["docker", "run"]
    assert result["container_image_id"] == IMAGE_ID
    # memory is sampled on the container's server process, not on the docker client
    assert result["mem"]["server_rss_peak_gib"] > 0.05
    assert result["server_version"]  # llama.cpp's build_info through the published port
    assert result["context_guard"]["per_slot_context"] == 512  # one slot: concurrency 1
    assert docker_calls(docker)[-1] == ["rm", "-f", "llmbench-" + cell.id]
    assert left_behind(str(weights_dir)) == []
