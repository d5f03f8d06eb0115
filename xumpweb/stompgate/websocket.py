"""/ws/stomp/: STOMP over WebSocket (subprotocols v12.stomp, v11.stomp, v10.stomp), in the ASGI app.

Only I/O: each WebSocket message (text or binary) goes to the session (session.py) as one
message of whole frames; what the session writes goes out as one message, text when it is
UTF-8 (what browsers' clients expect), binary otherwise. The console's session stands in
for a token when the CONNECT frame's passcode is empty (same-origin pages only: the Origin
check of live/security.py wraps every WebSocket).
"""

from __future__ import annotations

from typing import Any

from channels.exceptions import StopConsumer
from uvicorn.protocols.utils import ClientDisconnected

from xumpweb import metrics
from xumpweb.live.consumers import LayerlessConsumer
from xumpweb.live.security import session_user
from xumpweb.stompgate.session import Link, StompSession

SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
KIND = "stomp-websocket"


class StompConsumer(Link, LayerlessConsumer):
    async def websocket_connect(self, message: dict[str, Any]) -> None:
        self.gone = False
        offered = self.scope.get("subprotocols") or []
        chosen = next((p for p in SUBPROTOCOLS if p in offered), None)
        accept: dict[str, Any] = {"type": "websocket.accept"}
        if chosen is not None:
            accept["subprotocol"] = chosen
        await self.send(accept)
        metrics.stomp_connected(KIND)
        client = self.scope.get("client") or ("", 0)
        remote = f"{client[0]}:{client[1]}" if client and client[0] else ""
        self.session = StompSession(self, KIND, remote, user=session_user(self.scope))

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        data = message.get("bytes")
        if data is None:
            data = (message.get("text") or "").encode("utf-8", "surrogatepass")
        await self.session.receive_message(data)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        self.gone = True
        await self.session.finish()
        raise StopConsumer

    # -- the session's Transport ---------------------------------------------------------------
    lost = (ClientDisconnected,)

    async def _put(self, data: bytes) -> None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            event = {"type": "websocket.send", "bytes": data}
        else:
            event = {"type": "websocket.send", "text": text}
        await self.send(event)

    async def _shut(self) -> None:
        try:
            await self.send({"type": "websocket.close", "code": 1000})
        except ClientDisconnected:
            pass
