"""Restarts a server the way a service manager would (stop, start, wait until it answers).

The tests' stand-in for `systemctl restart mariadb`: argv = binary, defaults file, pid file,
socket. Exit code 0 when the server answers on its socket again, 1 when it does not start.
"""

import os
import signal
import socket
import subprocess
import sys
import time

binary, defaults, pid_file, socket_path = sys.argv[1:5]

try:
    with open(pid_file) as f:
        pid = int(f.read().strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        os.kill(pid, 0)  # raises once it is gone
        time.sleep(0.05)
except (OSError, ValueError):
    pass

server = subprocess.Popen([binary, f"--defaults-file={defaults}"], start_new_session=True,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    if server.poll() is not None:
        sys.exit(1)
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(socket_path)
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
    finally:
        probe.close()
sys.exit(1)
