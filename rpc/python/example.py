#!/usr/bin/python3
"""Draws IDs from an idgen cluster through idgen_client.IDPool.

    /usr/bin/python3 rpc/python/example.py --nodes 127.0.0.1:50051 -n 5
        prints 5 codes, one a line (as `idctl ids -n 5 --base62`)
    /usr/bin/python3 rpc/python/example.py --nodes h1:p1,h2:p2,h3:p3 --rate 3000 --duration 30
        draws 3,000 IDs/s for 30 s and prints one JSON summary line on
        stdout: draws, errors, duplicates, latency of next_id in
        microseconds, the pool's counters. The first draw, which waits for
        the connections, is timed apart (first_draw_us, not in draws or
        latency_us; its ID is in ids and the duplicate check). Progress goes to stderr, starting
        with a line "drawing" once the first ID is in. SIGTERM or SIGINT
        ends the run early, with its summary.

TLS: --ca ca.pem [--cert client.pem --key client-key.pem] [--server-name n]
(one name for every node: grpcio checks every address against it).
Exit code 0 when every draw succeeded and no ID came twice, 1 otherwise.
"""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grpc  # noqa: E402
import idgen_client  # noqa: E402


def credentials(args):
    if not args.ca:
        return None, ()
    read = lambda p: open(p, "rb").read() if p else None  # noqa: E731
    creds = grpc.ssl_channel_credentials(read(args.ca), read(args.key), read(args.cert))
    opts = (("grpc.ssl_target_name_override", args.server_name),) if args.server_name else ()
    return creds, opts


def percentile(sorted_ns, q):
    if not sorted_ns:
        return 0
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] // 1000


STOP = []  # SIGTERM or SIGINT ends a load run early, with its summary


def load(pool, rate, duration, timeout, slow_ms):
    ids, lat, errors, kinds = [], [], 0, {}

    def draw():
        nonlocal errors
        try:
            ids.append(pool.next_id(timeout))
        except Exception as e:  # every failure counts, by kind
            errors += 1
            kinds[type(e).__name__] = kinds.get(type(e).__name__, 0) + 1
            print("error: %s: %s" % (type(e).__name__, e), file=sys.stderr, flush=True)

    # The first draw waits for the channel: a connection (and a TLS
    # handshake) to every node and their health checks, which can outlast one
    # attempt's deadline. It is paid once per pool, not in a pause, so it is
    # reported apart (first_draw_us) and the clock starts after it.
    clock = time.perf_counter_ns
    t0 = clock()
    draw()
    first_us = (clock() - t0) // 1000
    tick = 0.005  # draw in 5 ms steps: rate/200 IDs each
    per_tick = rate * tick
    start = time.monotonic()
    owed, step, announced, next_progress = 0.0, 0, False, start + 1
    end = start + duration
    while True:
        now = time.monotonic()
        if now >= end or STOP:
            break
        owed += per_tick
        while owed >= 1:
            owed -= 1
            t0 = clock()
            draw()
            lat.append(clock() - t0)
        if not announced and ids:
            print("drawing", file=sys.stderr, flush=True)
            announced = True
        if now >= next_progress:
            print("progress t=%.0fs draws=%d errors=%d %s" % (now - start, len(ids), errors, json.dumps(pool.stats())),
                  file=sys.stderr, flush=True)
            next_progress += 1
        step += 1
        delay = start + step * tick - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.monotonic() - start
    lat.sort()
    return {
        "draws": len(lat),
        "ids": len(ids),
        "errors": errors,
        "error_kinds": kinds,
        "duplicates": len(ids) - len(set(ids)),
        "seconds": round(elapsed, 2),
        "rate": round(len(lat) / elapsed, 1) if elapsed else 0,
        "latency_us": {
            "p50": percentile(lat, 0.5),
            "p99": percentile(lat, 0.99),
            "p999": percentile(lat, 0.999),
            "max": lat[-1] // 1000 if lat else 0,
        },
        "first_draw_us": first_us,
        "slower_than_ms": slow_ms,
        "slow_draws": sum(1 for x in lat if x > slow_ms * 1_000_000),
        "pool": pool.stats(),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", required=True, help="host:port,host:port,... or a grpcio target (ipv4:..., dns:///...)")
    p.add_argument("-n", type=int, default=5, help="codes to print when --duration is not given")
    p.add_argument("--rate", type=float, default=3000, help="IDs per second to draw")
    p.add_argument("--duration", type=float, default=0, help="seconds to draw for (0: print -n codes)")
    p.add_argument("--timeout", type=float, default=1.0, help="next_id's timeout, seconds")
    p.add_argument("--call-timeout", type=float, default=0.150, help="one GetIDBatch attempt's deadline, seconds")
    p.add_argument("--slow-ms", type=float, default=100, help="a draw slower than this counts as slow")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--server-name")
    args = p.parse_args()

    creds, opts = credentials(args)
    pool = idgen_client.IDPool(args.nodes, credentials=creds, call_timeout=args.call_timeout, options=opts)
    try:
        if args.duration <= 0:
            for _ in range(args.n):
                print(pool.next_code(args.timeout))
            return 0
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: STOP.append(True))
        summary = load(pool, args.rate, args.duration, args.timeout, args.slow_ms)
    finally:
        pool.close()
    print(json.dumps(summary), flush=True)
    return 0 if summary["errors"] == 0 and summary["duplicates"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
