"""Hot-plug events: a pyudev netlink monitor for the pci, infiniband, net and nvidia subsystems.

``EventSource`` is the seam: ``start(notify)`` returns False when events cannot be had (no libudev,
no netlink socket in this network namespace, pyudev missing); the agent then logs that once and
rediscovers on its interval only. Tests pass their own source and call ``notify`` directly.

The default netlink source is ``kernel`` (raw kernel uevents, no udevd needed in the container);
``udev`` listens to udevd's processed events instead (needs the host's udevd and network namespace).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger(__name__)

SUBSYSTEMS = ("pci", "infiniband", "net", "nvidia")


class EventSource(Protocol):
    def start(self, notify: Callable[[str], None]) -> bool:
        """Begin delivering events (``notify("<subsystem> <action>")``); False when unavailable."""

    def stop(self) -> None: ...


class UdevEventSource:
    """pyudev ``Monitor`` + ``MonitorObserver`` (a background thread)."""

    def __init__(self, source: str = "kernel", subsystems: tuple[str, ...] = SUBSYSTEMS) -> None:
        self.source = source
        self.subsystems = subsystems
        self._observer: Any = None

    def start(self, notify: Callable[[str], None]) -> bool:
        try:
            import pyudev

            context = pyudev.Context()
            monitor = pyudev.Monitor.from_netlink(context, source=self.source)
            for subsystem in self.subsystems:
                monitor.filter_by(subsystem)

            def on_event(device: Any) -> None:
                notify(f"{device.subsystem} {device.action} {device.sys_name}")

            self._observer = pyudev.MonitorObserver(monitor, callback=on_event, name="nodetopo-udev")
            self._observer.daemon = True
            self._observer.start()
        except Exception as e:  # noqa: BLE001 - any failure means "no events"; the interval still runs
            log.warning(
                "udev events unavailable (%s: %s); rediscovering on the interval only", type(e).__name__, e
            )
            self._observer = None
            return False
        log.info("listening for %s uevents of %s", self.source, ", ".join(self.subsystems))
        return True

    def stop(self) -> None:
        if self._observer is not None:
            try:
                self._observer.send_stop()
            except Exception:  # best effort at shutdown
                log.debug("stopping the udev observer failed", exc_info=True)
            self._observer = None


class NoEvents:
    """An event source that never delivers (``udev: false``)."""

    def start(self, notify: Callable[[str], None]) -> bool:
        return False

    def stop(self) -> None:
        return None
