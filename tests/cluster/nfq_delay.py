"""Delay and loss for the packets an NFQUEUE rule hands to userspace (the kernel here has no
``tc netem``): each packet is accepted ``--delay-ms`` after it was queued, or dropped with
probability ``--loss``. Speaks nfnetlink_queue over a raw netlink socket (no library).

    ip netns exec NS python nfq_delay.py --queue 7 --delay-ms 100 --loss 0.05 --seed 1

Run inside the namespace whose iptables rule says ``-j NFQUEUE --queue-num 7 --queue-bypass``;
it runs until killed (SIGTERM), and the rule lets packets through unqueued once it is gone.
"""

from __future__ import annotations

import argparse
import collections
import random
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQNL_CFG_CMD_BIND = 1
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQA_PACKET_HDR = 1
NFQA_VERDICT_HDR = 2
NFQNL_COPY_META = 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST = 1
NLMSG_ERROR = 2


def _attr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind) + payload
    return raw + b"\0" * (-len(raw) % 4)


def _message(msg: int, queue: int, attrs: bytes, seq: int) -> bytes:
    body = struct.pack("!BBH", socket.AF_UNSPEC, 0, queue) + attrs  # nfgenmsg: family, version, res_id
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, NLM_F_REQUEST, seq, 0) + body


def _packet_ids(data: bytes):
    """The packet id of each NFQNL_MSG_PACKET in one netlink datagram."""
    pos = 0
    while pos + 16 <= len(data):
        length, kind, _, _, _ = struct.unpack_from("=IHHII", data, pos)
        if length < 16:
            return
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            a = pos + 16 + 4  # past nlmsghdr and nfgenmsg
            while a + 4 <= pos + length:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == NFQA_PACKET_HDR:
                    yield struct.unpack_from("!I", data, a + 4)[0]
                    break
                a += (alen + 3) & ~3
        pos += (length + 3) & ~3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--loss", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    delay = args.delay_ms / 1000
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((0, 0))
    seq = 0

    def send(msg: int, attrs: bytes) -> None:
        nonlocal seq
        seq += 1
        sock.send(_message(msg, args.queue, attrs, seq))

    send(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND, 0)))
    send(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META))
         + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", 20000)))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pending: collections.deque[tuple[float, int]] = collections.deque()  # (due, packet id), in order
    print(f"nfq_delay: queue {args.queue}, {args.delay_ms} ms, loss {args.loss}", flush=True)
    while True:
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, pid = pending.popleft()
            send(NFQNL_MSG_VERDICT, _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, pid)))
        timeout = max(0.0, pending[0][0] - now) if pending else 1.0
        if not select.select([sock], [], [], timeout)[0]:
            continue
        try:
            data = sock.recv(1 << 20)
        except OSError:  # ENOBUFS: the kernel dropped some queue messages; those packets time out
            continue
        now = time.monotonic()
        for pid in _packet_ids(data):
            if rnd.random() < args.loss:
                send(NFQNL_MSG_VERDICT, _attr(NFQA_VERDICT_HDR, struct.pack("!II", NF_DROP, pid)))
            else:
                pending.append((now + delay, pid))


if __name__ == "__main__":
    main()
