"""``make lab`` starts JupyterLab, also as root (containers, cloud VMs, dev containers), where Jupyter
refuses to start without --allow-root. The test starts it as the README says, waits for the server to
answer, and stops it."""
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "jupyter").exists(), reason="make lab needs the .venv that make installs")
def test_make_lab_starts_the_server_and_stops(tmp_path):
    port = free_port()
    args = f"--no-browser --ip=127.0.0.1 --port={port} --ServerApp.port_retries=0 --IdentityProvider.token=abc"
    log = open(tmp_path / "lab.log", "w+")
    proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"LAB_ARGS={args}"], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt")})
    try:
        deadline, status = time.time() + 300, None  # a hang guard
        while time.time() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token=abc", timeout=2) as r:
                    status = r.status
                    break
            except OSError:
                time.sleep(0.5)
        log.seek(0)
        text = log.read()
        assert status == 200, f"JupyterLab did not answer (exit {proc.poll()}):\n{text[-3000:]}"
        assert "Running as root is not recommended" not in text
        if os.geteuid() == 0:
            assert "allow-root" in text or proc.poll() is None  # it started as root
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()
    assert proc.poll() is not None
