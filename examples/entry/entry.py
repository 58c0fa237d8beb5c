#!/usr/bin/env python3
"""A nymph entry program in Python 3's standard library only.

The daemon runs it for every `run` without a script, in the invocation's
workdir, when [runtime] entry names it:

    [runtime]
    entry = ["python3", "/opt/nymph/entry.py"]

It reads args.msgpack, calls main() with what it holds, and writes
result.msgpack (main's return value, in msgpack) on success, or error.json
({type, message, traceback}) on failure. Its arguments are a msgpack map,
as `nymph ctl run --arg name=ada` (or --arg-json) makes them. See
docs/protocol.md, "Writing an entry program".
"""
import json
import os
import struct
import sys
import traceback


def main(args):
    """The work itself: the arguments in, the result out."""
    name = args.get("name")
    if not name:
        raise ValueError("no name: pass --arg name=WHO")
    return {"greeting": "hello, " + name}


# msgpack, the subset this example needs: what `nymph ctl run --arg` and
# --arg-json make, and what main() returns.
NUMBERS = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
           0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
SIZED = {0xC4: (">B", "bin"), 0xC5: (">H", "bin"), 0xC6: (">I", "bin"),
         0xD9: (">B", "str"), 0xDA: (">H", "str"), 0xDB: (">I", "str"),
         0xDC: (">H", "array"), 0xDD: (">I", "array"), 0xDE: (">H", "map"), 0xDF: (">I", "map")}


def unpack(b, i=0):
    """Decodes the msgpack value at b[i]; returns it and where it ends."""
    t = b[i]
    i += 1
    if t <= 0x7F or t >= 0xE0:
        return (t if t <= 0x7F else t - 0x100), i
    if t in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[t], i
    if t in NUMBERS:
        return struct.unpack_from(NUMBERS[t], b, i)[0], i + struct.calcsize(NUMBERS[t])
    if 0x80 <= t <= 0x8F:
        kind, n = "map", t & 0x0F
    elif 0x90 <= t <= 0x9F:
        kind, n = "array", t & 0x0F
    elif 0xA0 <= t <= 0xBF:
        kind, n = "str", t & 0x1F
    elif t in SIZED:
        fmt, kind = SIZED[t]
        n = struct.unpack_from(fmt, b, i)[0]
        i += struct.calcsize(fmt)
    else:
        raise ValueError("msgpack type 0x%02x is not handled by this entry program" % t)
    if kind in ("str", "bin"):
        raw = bytes(b[i:i + n])
        return (raw.decode() if kind == "str" else raw), i + n
    items = []
    for _ in range(n * 2 if kind == "map" else n):
        v, i = unpack(b, i)
        items.append(v)
    if kind == "map":
        return dict(zip(items[0::2], items[1::2])), i
    return items, i


def pack(v):
    """Encodes None, bool, int, float, str, bytes, list and dict as msgpack."""
    if v is None:
        return b"\xc0"
    if isinstance(v, bool):
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        v = v.encode()
        return b"\xdb" + struct.pack(">I", len(v)) + v
    if isinstance(v, bytes):
        return b"\xc6" + struct.pack(">I", len(v)) + v
    if isinstance(v, list):
        return b"\xdd" + struct.pack(">I", len(v)) + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        return b"\xdf" + struct.pack(">I", len(v)) + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError("cannot encode %s as msgpack" % type(v).__name__)


def run():
    workdir = os.environ.get("DREAMLAKE_WORKDIR", ".")
    try:
        with open(os.path.join(workdir, "args.msgpack"), "rb") as f:
            raw = f.read()
        args, end = unpack(raw) if raw else ({}, 0)  # no arguments: an empty file
        if end != len(raw) or not isinstance(args, dict):
            raise ValueError("args.msgpack is not one msgpack map")
        result = main(args)
        with open(os.path.join(workdir, "result.msgpack"), "wb") as f:
            f.write(pack(result))
        return 0
    except Exception as e:
        error = {"type": type(e).__name__, "message": str(e), "traceback": traceback.format_exc()}
        with open(os.path.join(workdir, "error.json"), "w") as f:
            json.dump(error, f)
        # Standard error goes to the daemon's log, beside the invocation id.
        print("entry.py: %s: %s" % (error["type"], error["message"]), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
