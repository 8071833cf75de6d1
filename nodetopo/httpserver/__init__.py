"""A small HTTP/1.1 server that survives hostile and careless clients (the extender, the agent's health port).

``http.server.ThreadingHTTPServer`` as shipped has no limits: a thread per connection without a cap,
no socket timeout (a client that sends half a request holds its thread forever), a listen backlog of
5 (a burst of concurrent connections sees resets), and every client that disconnects early prints a
``BrokenPipeError`` traceback on stderr. ``BoundedHTTPServer`` fixes each of these by construction:

* **a slot only for a request that has arrived**: the accept loop never waits. A new connection
  goes to a waiting room (one thread, edge-triggered epoll) and holds no thread and no slot until
  the head of its request (request line and headers) is in the socket buffer, which must happen
  within ``request_timeout_s`` of connecting or the connection is closed. A keep-alive connection
  goes back to the room between requests when others need its slot (after ``idle_timeout_s`` it
  is closed). The room holds at most ``Limits.max_waiting`` connections (and at most half the
  process's file descriptors); when it is full, the connection waiting longest is closed. So idle
  connections and request heads sent a byte at a time cost a file descriptor each, never a slot:
  a real request waits only for other requests that have arrived (issue 23: 64 idle connections
  held the health port's 16 slots and made ``/healthz`` take 6-15 s);
* **bounded concurrency**: at most ``Limits.max_connections`` requests are served at once (one
  thread each); requests whose head has arrived wait for a slot in arrival order, and while one
  waits, requests in progress for longer than a fifth of ``request_timeout_s`` are shut down,
  oldest first (real requests take milliseconds: those are clients trickling a body or not
  reading the answer). The kernel's listen queue is ``Limits.backlog`` (1024) deep;
* **timeouts**: once a request's head has arrived, the rest (body, handling, answer) must finish
  within ``request_timeout_s`` or a reaper thread shuts the socket down, however slowly the
  client trickles bytes in;
* **quiet disconnects**: a client that goes away (reset, broken pipe, timeout, TLS failure) is a
  debug log line, never a traceback; any other handler failure is one error line (traceback at
  debug level);
* **TLS** when given an ``ssl.SSLContext``: the room cannot read a head through TLS, so a TLS
  connection takes a slot when its first bytes arrive; the handshake runs in the connection's
  thread under the request deadline (and the eviction above), so a client that never finishes it
  cannot block the accept loop.

``BoundedHandler`` adds strict request-body reading (``read_body``): a ``Content-Length`` made of
digits and at most ``max_body`` bytes, no chunked bodies; anything else gets a 4xx answer and the
connection is closed, so the unread remainder of a refused body is never taken for the next request.
"""

from nodetopo.httpserver.limits import QUIET_ERRORS, HttpError, Limits, head_complete
from nodetopo.httpserver.server import BoundedHandler, BoundedHTTPServer

__all__ = ["QUIET_ERRORS", "BoundedHTTPServer", "BoundedHandler", "HttpError", "Limits", "head_complete"]
