"""WebSocket endpoints: a conversation in which both ends send messages until one closes.

* :mod:`chains.websocket.protocol`: :class:`WebSocketProtocol`, what ``run_remote`` is given;
* :mod:`chains.websocket.disconnect`: :class:`WebSocketDisconnect`, raised once the peer closed;
* :mod:`chains.websocket.signature`: the endpoint's static rules;
* :mod:`chains.websocket.wire`: how failures cross a socket (the ``chains.ws.v1`` subprotocol);
* :mod:`chains.websocket.client`: the client socket a stub opens to a WebSocket dependency;
* :mod:`chains.websocket.local`: both ends in one process, for ``chains.run_local``.

The server side is ``chains.server.websocket``.
"""

from chains.websocket.protocol import Message, SocketBase, WebSocketProtocol

__all__ = ["Message", "SocketBase", "WebSocketProtocol"]
