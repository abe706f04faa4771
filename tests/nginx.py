"""A real nginx for tests: its own config, files and port on 127.0.0.1, run as the test's child.

Tests put it between chainlets or in front of them, as a reverse proxy or as a stand-in for a
platform's gateway; every wait is bounded and the process is always stopped.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import unique_port, wait_until

# Set by .ci/run: the tests behind nginx then fail, not skip, when it is missing.
REQUIRE_NGINX = "CHAINS_REQUIRE_NGINX"


def nginx_binary() -> str:
    """The nginx executable. When it is missing the tests that need it skip, saying how to run
    them; with CHAINS_REQUIRE_NGINX=1 (CI, as root) it is installed from the system's packages."""
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    if not os.environ.get(REQUIRE_NGINX):
        pytest.skip(
            "nginx is not installed: install it (apt-get install nginx) to run the tests behind a "
            f"real proxy, or set {REQUIRE_NGINX}=1 as root to have the tests install it"
        )
    if os.geteuid() != 0:
        pytest.fail(f"{REQUIRE_NGINX} is set but nginx is not installed and only root can install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "nginx"]
    if subprocess.run(install, env=env, capture_output=True, timeout=600, check=False).returncode != 0:
        # A fresh machine may not have the package lists yet.
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=True)
        subprocess.run(install, env=env, capture_output=True, timeout=600, check=True)
    return "/usr/sbin/nginx"


@dataclass
class Site:
    """One nginx ``server`` block: ``port`` on 127.0.0.1 proxying to ``upstream``."""

    name: str
    upstream: str
    directives: list[str] = field(default_factory=list)
    port: int = field(default_factory=unique_port)
    # False: the site's directives alone, without the shared HTTP/1.1 ones (a WebSocket site
    # sets its own Connection header).
    shared: bool = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


# What every site shares: HTTP/1.1 to the upstream, so that a chunked response keeps its
# framing through the proxy. (nginx's default, HTTP/1.0, turns the upstream's answer into a
# body delimited by closing the connection, where a cut looks like a clean end.)
_COMMON = ["proxy_http_version 1.1;", 'proxy_set_header Connection "";']


class Nginx:
    """A real nginx with its own config and files in ``folder``, in the foreground as our child."""

    def __init__(self, binary: str, folder: Path, sites: list[Site], http: list[str] | None = None) -> None:
        self.binary = binary
        self.folder = folder
        self.http = http or []  # directives of the http block, e.g. a map
        self.sites = {site.name: site for site in sites}
        self.process: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        f = self.folder
        user = f"user {pwd.getpwuid(os.getuid()).pw_name};" if os.geteuid() == 0 else ""
        servers = []
        for site in self.sites.values():
            lines = "\n            ".join([*(_COMMON if site.shared else []), *site.directives])
            servers.append(
                f"""
    server {{
        listen 127.0.0.1:{site.port};
        location / {{
            proxy_pass {site.upstream};
            {lines}
        }}
    }}"""
            )
        return f"""
daemon off;
worker_processes 1;
{user}
pid {f}/nginx.pid;
error_log {f}/error.log info;
events {{ worker_connections 1024; }}
http {{
    access_log {f}/access.log;
    client_body_temp_path {f}/client_body;
    proxy_temp_path {f}/proxy;
    fastcgi_temp_path {f}/fastcgi;
    uwsgi_temp_path {f}/uwsgi;
    scgi_temp_path {f}/scgi;
    {" ".join(self.http)}
    {"".join(servers)}
}}
"""

    def start(self) -> Nginx:
        self.folder.mkdir(parents=True, exist_ok=True)
        conf = self.folder / "nginx.conf"
        conf.write_text(self.config())
        command = [self.binary, "-p", str(self.folder), "-c", str(conf), "-e", str(self.folder / "error.log")]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30, check=False)
        assert check.returncode == 0, f"nginx refused its config:\n{check.stderr}\n{self.config()}"
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        for site in self.sites.values():
            wait_until(lambda s=site: _listening(s.port), 10, f"nginx listening on {site.port}")
        return self

    def errors(self) -> str:
        path = self.folder / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # nginx's fast shutdown
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def __getitem__(self, name: str) -> Site:
        return self.sites[name]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0
