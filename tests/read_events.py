#!/usr/bin/env python3
"""Prints the scalars of TensorBoard event files as JSON lines {"step","tag","value"},
with only the standard library: each record's length and crc32c checked, the Event,
Summary and Summary.Value protobuf fields that scalars use decoded by hand.
usage: read_events.py FILE..."""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def fields(buf):
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        yield num, v


def varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        (lcrc,) = struct.unpack_from("<I", data, at + 8)
        assert lcrc == masked(data[at:at + 8]), "%s: bad length crc at %d" % (path, at)
        rec = data[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        assert dcrc == masked(rec), "%s: bad data crc at %d" % (path, at)
        at += 16 + n
        yield rec


for path in sys.argv[1:]:
    for rec in records(path):
        step = 0
        summary = None
        for num, v in fields(rec):
            if num == 2:
                step = v
            elif num == 5:
                summary = v
        if summary is None:
            continue
        for num, v in fields(summary):
            if num != 1:
                continue
            tag, value = None, None
            for n2, v2 in fields(v):
                if n2 == 1:
                    tag = v2.decode()
                elif n2 == 2:
                    (value,) = struct.unpack("<f", v2)
            if tag is not None and value is not None:
                print(json.dumps({"step": step, "tag": tag, "value": value}))
