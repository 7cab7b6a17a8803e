"""A Python client for idgen: a pool of prefetched Snowflake IDs.

Needs Debian's python3-grpcio and python3-protobuf (run with /usr/bin/python3
where another Python is first on PATH). The stubs in gen/ are generated from
proto/idgen/v1/idgen.proto by scripts/genpy. README.md beside this file is
the manual; example.py is a load driver that uses it.

    pool = IDPool(["10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"])
    try:
        code = pool.next_code()   # "4fK2x9a"; usually no network call
        id_ = pool.next_id()      # the same as an int
    finally:
        pool.close()

What rides through a paused node is the per-call deadline, the retry on the
next node and the buffer, not health checking: a SIGSTOPped node stays
SERVING with its connection open, so round robin keeps sending it one call in
N for the whole pause, and each such call costs one deadline.
"""

import hashlib
import json
import os
import socket
import sys
import threading
import time
from collections import deque

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))
from idgen.v1 import idgen_pb2, idgen_pb2_grpc  # noqa: E402  (generated, scripts/genpy)

__all__ = ["IDPool", "PoolClosed", "BadBatch", "IDTimeout", "encode_base62", "decode_base62", "target", "layout_bits",
           "rendezvous_order"]

# The default layout (generator.DefaultLayout), as the nodes write a layout:
# what nodes older than GetIDBatchResponse.layout run. A cluster founded with
# another --layout names its own in every answer, and the pool takes it.
DEFAULT_LAYOUT = "28/2/1/11 unit=1s epoch=1777939200"


def layout_bits(text):
    """The (timestamp, datacenter, machine, sequence) bits of a layout as the
    nodes write it ("35/2/1/11 unit=10ms epoch=1777939200")."""
    parts = text.split()[0].split("/") if text.split() else []
    bits = tuple(int(p) for p in parts if p.isdigit())
    if len(parts) != 4 or len(bits) != 4 or sum(bits) > 63 or bits[0] < 1 or bits[3] < 1:
        raise ValueError("layout %r: want ts/dc/m/seq bits, at most 63 in all, as the nodes write it" % (text,))
    return bits

# Codes retried on the next node. DEADLINE_EXCEEDED is the paused node;
# service-config retries never retry it, so the retry is ours.
RETRY_CODES = frozenset({
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
})

HEALTH_SERVICE = "idgen.v1.IDService"

_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGITS = {c: i for i, c in enumerate(_ALPHABET)}


class PoolClosed(Exception):
    """next_id after close, once every fetched ID is taken."""


class BadBatch(Exception):
    """A batch that fails the checks (layout, count, slot, strictly increasing)."""


class IDTimeout(Exception):
    """next_id found no ID within its timeout; the last fetch error is its cause."""


def encode_base62(id_):
    """Plain base62 (0-9a-zA-Z), most significant digit first: generator.Encode."""
    if id_ < 0:
        raise ValueError("negative ID %d" % id_)
    if id_ == 0:
        return "0"
    out = []
    while id_:
        id_, d = divmod(id_, 62)
        out.append(_ALPHABET[d])
    return "".join(reversed(out))


def decode_base62(code):
    """The inverse of encode_base62 (generator.Decode)."""
    if not code:
        raise ValueError("empty code")
    v = 0
    for i, c in enumerate(code):
        if c not in _DIGITS:
            raise ValueError("character %r at position %d is not in 0-9a-zA-Z" % (c, i))
        v = v * 62 + _DIGITS[c]
    if v >= 1 << 63:
        raise ValueError("%r overflows int64" % code)
    return v


def target(addrs):
    """The grpcio target for a list of host:port: "ipv4:h1:p1,h2:p2".

    A bare "h1:p1,h2:p2" is one DNS name to grpcio and never connects. IPv6
    addresses take "ipv6:[::1]:p1,[::2]:p2"; one DNS name that resolves to
    every node takes "dns:///idgen.internal:50051".
    """
    if isinstance(addrs, str):
        if addrs.startswith(("ipv4:", "ipv6:", "dns:", "unix:")):
            return addrs
        addrs = addrs.split(",")
    addrs = [a.strip() for a in addrs if a.strip()]
    if not addrs:
        raise ValueError("no node addresses")
    scheme = "ipv6" if addrs[0].startswith("[") else "ipv4"
    return scheme + ":" + ",".join(addrs)


def rendezvous_order(key, addrs):
    """addrs by highest random weight for key, best first: the weight of an
    address is the first 8 bytes, big-endian, of SHA-256(key, 0, addr), ties
    by address, as idclient ranks them (rpc/idclient/subset.go), so a Go and
    a Python client with one key pick the same nodes."""
    def weight(a):
        return int.from_bytes(hashlib.sha256((key + "\0" + a).encode()).digest()[:8], "big")
    return sorted(addrs, key=lambda a: (-weight(a), a))


class _Subset:
    """The nodes a pool with a subset uses: the first size of rendezvous_order
    that are not failing, and the failing ones ranked before them, a channel
    each. A node fails when its channel is in TRANSIENT_FAILURE, which with
    health checking includes NOT_SERVING, and stays failing while it
    reconnects, until READY: its channel stays open, so its recovery is
    seen, and then the nodes that stood in for it are closed again. Only the
    fetcher thread opens and closes channels (update); the connectivity
    callbacks only record states."""

    def __init__(self, addrs, size, key, connect):
        self._order = rendezvous_order(key, addrs)
        self._size = size
        self._connect = connect  # address -> channel
        self._lock = threading.Lock()
        self._chans = {}         # address -> (channel, stub): the nodes in use
        self._state = {}         # address -> its channel's last connectivity
        self._failing = set()
        self._next = 0
        self.update()

    def _watch(self, addr, channel):
        def on_state(state):
            with self._lock:
                if self._chans.get(addr, (None,))[0] is not channel:
                    return  # a channel closed since
                self._state[addr] = state
                if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
                    self._failing.add(addr)
                elif state == grpc.ChannelConnectivity.READY:
                    self._failing.discard(addr)
        return on_state

    def update(self):
        """Opens channels to the nodes the subset has now and closes the others."""
        with self._lock:
            keep, want = [], self._size
            for a in self._order:
                keep.append(a)
                want -= a not in self._failing
                if want == 0:
                    break
            gone = [a for a in self._chans if a not in keep]
            closing = [self._chans.pop(a)[0] for a in gone]
            for a in gone:
                self._state.pop(a, None)
                self._failing.discard(a)
            opening = [a for a in keep if a not in self._chans]
        for a in opening:
            channel = self._connect(a)
            with self._lock:
                self._chans[a] = (channel, idgen_pb2_grpc.IDServiceStub(channel))
            channel.subscribe(self._watch(a, channel), try_to_connect=True)
        for channel in closing:
            channel.close()

    def stub(self):
        """The next stub in round robin over the nodes in use that are READY
        (over all in use while none is)."""
        in_use = self.in_use()
        with self._lock:
            ready = [a for a in in_use if self._state.get(a) == grpc.ChannelConnectivity.READY]
            cands = ready or in_use
            self._next += 1
            return self._chans[cands[self._next % len(cands)]][1]

    def in_use(self):
        """The addresses with an open channel, best first."""
        with self._lock:
            return [a for a in self._order if a in self._chans]

    def close(self):
        with self._lock:
            closing = [c for c, _ in self._chans.values()]
            self._chans.clear()
        for channel in closing:
            channel.close()


# Round robin over every address, each checked on the gRPC health service:
# a node that is not ready (NOT_SERVING) is skipped. grpcio needs no import
# for healthCheckConfig. No retryPolicy: the pool retries itself, on the next
# node, including DEADLINE_EXCEEDED.
SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "healthCheckConfig": {"serviceName": HEALTH_SERVICE},
})


class IDPool:
    """Hands out IDs one at a time from batches a background thread prefetches.

    addrs: node addresses ("host:port" list or comma string), or a grpcio
    target ("ipv4:...", "dns:///..."). credentials: grpc.ssl_channel_credentials
    for TLS (None: plaintext, which only nodes on loopback or started with
    --insecure accept). call_timeout: the deadline of one GetIDBatch attempt
    (150 ms: a few times a LAN's latency). attempts: attempts per fetch, each
    on the next node. buffer_seconds: IDs kept ready, in seconds of the
    current draw rate (at least min_batches batches). batch_size: 0 takes the
    node's default batch (served from its own buffer). layout: the cluster's
    layout, as idctl status prints it, to accept batches of only; None takes
    the layout the first node serves, and refuses nodes serving another.
    subset_size: with a list of more nodes than this, connect to this many of
    them, chosen by subset_key (default: the host name, the pod's name on
    Kubernetes; pods that share one certificate still need distinct keys) as
    idclient.WithSubset chooses them, and to the next ones in the key's order
    while some of those fail. Safe for many threads.
    """

    def __init__(self, addrs, credentials=None, call_timeout=0.150, attempts=3,
                 buffer_seconds=3.0, min_batches=2, batch_size=0,
                 layout=None, options=(), subset_size=0, subset_key=None):
        if call_timeout <= 0 or attempts < 1 or buffer_seconds < 0 or min_batches < 1 or batch_size < 0:
            raise ValueError("invalid pool options")
        self._target = target(addrs)
        opts = [("grpc.service_config", SERVICE_CONFIG), ("grpc.enable_retries", 0)] + list(options)

        def connect(t):
            if credentials is None:
                return grpc.insecure_channel(t, options=opts)
            return grpc.secure_channel(t, credentials, options=opts)

        scheme, _, rest = self._target.partition(":")
        self._subset = None
        if subset_size > 0 and scheme in ("ipv4", "ipv6") and len(rest.split(",")) > subset_size:
            self._subset = _Subset(rest.split(","), subset_size, subset_key or socket.gethostname(),
                                   lambda a: connect(scheme + ":" + a))
        elif subset_size > 0 and scheme not in ("ipv4", "ipv6"):
            raise ValueError("subset_size needs the nodes' addresses (a list), not %r" % (self._target,))
        else:
            self._channel = connect(self._target)
            self._stub = idgen_pb2_grpc.IDServiceStub(self._channel)
        self._call_timeout = call_timeout
        self._attempts = attempts
        self._buffer_seconds = buffer_seconds
        self._min_batches = min_batches
        self._batch_size = batch_size

        self._lock = threading.Lock()
        self._layout = None       # the cluster's layout text, once known
        self._layout_from = None  # the node that first served it (None: pinned)
        if layout is not None:
            self._learn_layout(layout, None)
        self._have = threading.Condition(self._lock)  # an ID landed, or the fetcher stopped
        self._room = threading.Condition(self._lock)  # the buffer fell under its target, or close
        self._batches = deque()  # fetched lists of IDs; batches[0] is being consumed
        self._pos = 0            # next index in batches[0]
        self._ready = 0          # IDs ready in all batches
        self._want = 0           # IDs the fetcher keeps ready (set by the fetcher)
        self._closed = False
        self._stopped = False
        self._last_error = None
        self._drawn = 0          # IDs taken, for the draw rate
        self._rate = 0.0         # IDs/s: rises at once, falls slowly

        # Counters for a report (stats()).
        self._fetches = 0
        self._retries = 0
        self._failed_fetches = 0
        self._errors_by_code = {}
        self._by_node = {}

        self._thread = threading.Thread(target=self._fetch_loop, name="idgen-pool-fetcher", daemon=True)
        self._thread.start()

    # --- the caller's side

    def next_id(self, timeout=1.0):
        """The next ID; waits up to timeout seconds when the buffer is empty.

        Raises IDTimeout (its __cause__ the last fetch error, if any) after
        timeout, PoolClosed after close once every fetched ID is taken.
        """
        deadline = None
        with self._lock:
            while self._ready == 0:
                if self._stopped:
                    raise PoolClosed("idgen pool closed")
                now = time.monotonic()
                if deadline is None:
                    deadline = now + timeout
                if now >= deadline:
                    raise IDTimeout("no ID within %.3f s (last fetch error: %s)" % (timeout, self._last_error)) from self._last_error
                self._room.notify()
                self._have.wait(deadline - now)
            batch = self._batches[0]
            id_ = batch[self._pos]
            self._pos += 1
            self._ready -= 1
            self._drawn += 1
            if self._pos == len(batch):
                self._batches.popleft()
                self._pos = 0
            if self._ready < self._want:
                self._room.notify()
            return id_

    def next_code(self, timeout=1.0):
        """The next ID in plain base62 (FF1-encrypted codes stay with the Go codec)."""
        return encode_base62(self.next_id(timeout))

    def close(self):
        """Stops prefetching and closes the channel; IDs already fetched can
        still be taken, then next_id raises PoolClosed. Idempotent."""
        with self._lock:
            self._closed = True
            self._room.notify_all()
        self._thread.join()
        if self._subset is None:
            self._channel.close()
        else:
            self._subset.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stats(self):
        """Counters: fetches, retries (attempts after a first failed one),
        failed_fetches (every attempt failed), errors by status code, batches
        by serving node, the draw rate, IDs ready and, with a subset, the
        nodes in use (best first)."""
        with self._lock:
            return {
                "fetches": self._fetches,
                "retries": self._retries,
                "failed_fetches": self._failed_fetches,
                "attempt_errors": dict(self._errors_by_code),
                "batches_by_node": dict(self._by_node),
                "rate": round(self._rate, 1),
                "ready": self._ready,
                "nodes_in_use": None if self._subset is None else self._subset.in_use(),
            }

    # --- the fetcher thread: the only caller of GetIDBatch

    def _fetch_loop(self):
        backoff, last = 0.02, time.monotonic()
        try:
            while True:
                with self._lock:
                    while True:
                        now = time.monotonic()
                        if now - last >= 0.1:
                            inst = self._drawn / (now - last)
                            self._rate = inst if inst > self._rate else 0.9 * self._rate + 0.1 * inst
                            self._drawn, last = 0, now
                        batch = len(self._batches[-1]) if self._batches else (self._batch_size or 1000)
                        # Besides the batch being consumed: min_batches, or
                        # buffer_seconds of draws, whichever is more.
                        self._want = batch + max(self._min_batches * batch,
                                                 int(self._rate * self._buffer_seconds))
                        if self._closed:
                            return
                        if self._ready < self._want:
                            break
                        self._room.wait(0.1)
                ids, err = self._fetch()
                with self._lock:
                    if ids is None:
                        self._last_error = err
                    else:
                        self._last_error = None
                        self._batches.append(ids)
                        self._ready += len(ids)
                        self._have.notify_all()
                if ids is None:
                    with self._lock:  # close() cuts the backoff short
                        if not self._closed:
                            self._room.wait(backoff)
                    backoff = min(2 * backoff, 1.0)
                else:
                    backoff = 0.02
        finally:
            with self._lock:
                self._stopped = True
                self._have.notify_all()

    def _fetch(self):
        """One fetch: up to attempts calls, each with its own deadline. One
        thread makes every call, so on the round-robin channel (or over the
        subset's nodes) each retry goes to the next node. Returns (ids, None)
        or (None, last error)."""
        err = None
        if self._subset is not None:
            self._subset.update()
        for attempt in range(self._attempts):
            if attempt:
                with self._lock:
                    self._retries += 1
            stub = self._stub if self._subset is None else self._subset.stub()
            try:
                resp = stub.GetIDBatch(idgen_pb2.GetIDBatchRequest(count=self._batch_size),
                                       timeout=self._call_timeout)
                ids = list(resp.ids)
                self._check(resp, ids)
            except grpc.RpcError as e:
                err = e
                code = e.code()
                with self._lock:
                    self._errors_by_code[code.name] = self._errors_by_code.get(code.name, 0) + 1
                if code not in RETRY_CODES:
                    break
                continue
            except BadBatch as e:
                err = e
                with self._lock:
                    self._errors_by_code["BAD_BATCH"] = self._errors_by_code.get("BAD_BATCH", 0) + 1
                continue
            with self._lock:
                self._fetches += 1
                self._by_node[resp.node] = self._by_node.get(resp.node, 0) + 1
            return ids, None
        with self._lock:
            self._failed_fetches += 1
        return None, err

    def _learn_layout(self, text, node):
        ts, dc, m, seq = layout_bits(text)
        with self._lock:
            self._layout, self._layout_from = text, node
            self._seq_bits, self._slot_mask = seq, (1 << (dc + m)) - 1
            self._max_id = (1 << (ts + dc + m + seq)) - 1

    @property
    def layout(self):
        """The cluster's layout as the nodes write it; None until a node has
        served a batch (or unless one was given)."""
        with self._lock:
            return self._layout

    def _check(self, resp, ids):
        """The batch checks idclient makes before anyone gets an ID from it:
        the layout the pool's cluster has, the count asked (any for 0), every
        ID inside the layout and of the slot the response names, strictly
        increasing."""
        text = resp.layout or DEFAULT_LAYOUT
        if self._layout is None:
            try:
                self._learn_layout(text, resp.node)
            except ValueError as e:
                raise BadBatch("node %r names %s" % (resp.node, e))
        elif text != self._layout:
            first = "pinned" if self._layout_from is None else "first served by node %r" % (self._layout_from,)
            raise BadBatch("node %r serves layout %s, and this pool's cluster has layout %s (%s)"
                           % (resp.node, text, self._layout, first))
        n = self._batch_size
        if not ids or (n and len(ids) != n):
            raise BadBatch("%d IDs for a request of %d, from node %r" % (len(ids), n, resp.node))
        slot, shift, mask, top = resp.slot, self._seq_bits, self._slot_mask, self._max_id
        prev = -1
        for i, id_ in enumerate(ids):
            if id_ < 0 or id_ > top or (id_ >> shift) & mask != slot:
                raise BadBatch("ID %d is not an ID of slot %d, from node %r" % (id_, slot, resp.node))
            if id_ <= prev:
                raise BadBatch("ID %d follows %d (position %d), not strictly increasing, from node %r"
                               % (id_, prev, i, resp.node))
            prev = id_
