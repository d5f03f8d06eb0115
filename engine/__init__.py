"""Xump's engine: queues joined by selectors (see SPEC §3). The public API only."""

from engine.core import Engine, QueueInfo, StoreInfo
from engine.message import Delivery, Message
from engine.selectors import Selector

__all__ = ["Delivery", "Engine", "Message", "QueueInfo", "Selector", "StoreInfo"]
