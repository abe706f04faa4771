"""A TCP proxy that cuts its first connections mid-answer: connection ``i`` is closed, both ways,
once ``cuts[i]`` bytes of the server's answer went through, as a proxy's timeout or a lost
network would close it. Later connections pass whole."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Sequence
from types import TracebackType


class CuttingProxy:
    def __init__(self, upstream: str, *, cuts: Sequence[int]) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(port.rstrip("/")))
        self._cuts = list(cuts)
        self.cut = 0  # connections cut so far
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> CuttingProxy:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                limit = self._cuts.pop(0) if self._cuts else None
            server = socket.create_connection(self._upstream)
            threading.Thread(target=self._pipe, args=(client, server, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, limit), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, limit: int | None) -> None:
        passed = 0
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if limit is not None and passed + len(data) >= limit:
                    sink.sendall(data[: limit - passed])
                    with self._lock:
                        self.cut += 1
                    break
                sink.sendall(data)
                passed += len(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()
