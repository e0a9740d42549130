#!/usr/bin/python3
"""Writes TFRecord files and MosaicML MDS directories for stoker's tests, with nothing but the
standard library (struct, json, zlib, gzip, hashlib) and, for zstd-compressed MDS shards, the
zstd command-line tool. Every sample k is a function of k, so a test can check each field.

  write_records.py tfrecord OUT FIRST COUNT [--codec none|gzip|zlib]
  write_records.py mds DIR COUNT PER_SHARD [--compression zstd:3|gz:6|bz2:9] [--hashes sha1,md5]
                   [--drop-raw]
"""
import argparse
import bz2
import gzip
import hashlib
import json
import os
import struct
import subprocess
import zlib

# ---- TFRecord -------------------------------------------------------------------------------

def _crc32c_table():
    table = []
    for b in range(256):
        crc = b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return table

_TABLE = _crc32c_table()

def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = (crc >> 8) ^ _TABLE[(crc ^ b) & 0xFF]
    return crc ^ 0xFFFFFFFF

def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def frame(data):
    length = struct.pack('<Q', len(data))
    return (length + struct.pack('<I', masked(crc32c(length))) + data +
            struct.pack('<I', masked(crc32c(data))))

def varint(v):
    v &= (1 << 64) - 1  # negative int64s are ten bytes, as protobuf writes them
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)

def ld(field, payload):  # a length-delimited field
    return varint((field << 3) | 2) + varint(len(payload)) + payload

def int64_feature(values):
    return ld(3, ld(1, b''.join(varint(v) for v in values)))

def float_feature(values):
    return ld(2, ld(1, struct.pack('<%df' % len(values), *values)))

def bytes_feature(values):
    return ld(1, b''.join(ld(1, v) for v in values))

def example(features):
    entries = b''.join(ld(1, ld(1, name.encode()) + ld(2, feature)) for name, feature in features)
    return ld(1, entries)

def tf_sample(k):
    return example([
        ('id', int64_feature([k])),
        ('value', float_feature([k * 0.5, -float(k)])),
        ('text', bytes_feature([('sample-%d' % k).encode() + b'x' * (k % 7)])),
        ('label', int64_feature([k % 10])),
    ])

def write_tfrecord(args):
    data = b''.join(frame(tf_sample(k)) for k in range(args.first, args.first + args.count))
    if args.codec == 'gzip':
        data = gzip.compress(data)
    elif args.codec == 'zlib':
        data = zlib.compress(data)
    with open(args.out, 'wb') as f:
        f.write(data)

# ---- MDS ------------------------------------------------------------------------------------

# Column -> (encoding, fixed size or None); MDSWriter sorts the columns by name.
COLUMNS = {
    'arr': ('ndarray', None),
    'blob': ('bytes', None),
    'fixed': ('ndarray:float32:2,2', 16),
    'id': ('int', 8),
    'label': ('uint8', 1),
    'meta': ('json', None),
    'num': ('str_int', None),
    'score': ('float32', 4),
    'text': ('str', None),
}

def mds_values(k):
    rows, cols = 2, k % 3 + 1
    arr = bytes([17, (2 << 2) | 0, rows, cols]) + struct.pack('<%dh' % (rows * cols),
                                                             *[k + i for i in range(rows * cols)])
    return {
        'arr': arr,
        'blob': bytes([k % 256]) * (k % 5),
        'fixed': struct.pack('<4f', k, k + 1, k + 2, k + 3),
        'id': struct.pack('<q', k),
        'label': struct.pack('<B', k % 10),
        'meta': json.dumps({'k': k}).encode(),
        'num': str(-k).encode(),
        'score': struct.pack('<f', k / 4),
        'text': ('text %d' % k).encode(),
    }

def encode_sample(k):
    values = mds_values(k)
    names = sorted(COLUMNS)
    sizes = [len(values[n]) for n in names if COLUMNS[n][1] is None]
    return struct.pack('<%dI' % len(sizes), *sizes) + b''.join(values[n] for n in names)

def file_info(basename, data, hashes):
    return {'basename': basename, 'bytes': len(data),
            'hashes': {h: hashlib.new(h, data).hexdigest() for h in hashes}}

def compress(codec, path, data):
    name, _, level = codec.partition(':')
    level = int(level) if level else None
    out = path + '.' + name
    if name == 'zstd':
        subprocess.run(['zstd', '-q', '-f', '-%d' % (level or 3), path, '-o', out], check=True)
    elif name == 'gz':
        with open(out, 'wb') as f:
            f.write(gzip.compress(data, level or 9))
    elif name == 'bz2':
        with open(out, 'wb') as f:
            f.write(bz2.compress(data, level or 9))
    with open(out, 'rb') as f:
        return os.path.basename(out), f.read()

def write_mds(args):
    os.makedirs(args.dir, exist_ok=True)
    names = sorted(COLUMNS)
    hashes = sorted(h for h in args.hashes.split(',') if h)
    config = {'column_encodings': [COLUMNS[n][0] for n in names], 'column_names': names,
              'column_sizes': [COLUMNS[n][1] for n in names], 'compression': args.compression,
              'format': 'mds', 'hashes': hashes, 'size_limit': 1 << 26, 'version': 2}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    shards = []
    for first in range(0, args.count, args.per_shard):
        samples = [encode_sample(k) for k in range(first, min(first + args.per_shard, args.count))]
        header = 4 + 4 * (len(samples) + 1) + len(config_bytes)
        offsets = [header]
        for s in samples:
            offsets.append(offsets[-1] + len(s))
        raw = (struct.pack('<I', len(samples)) + struct.pack('<%dI' % len(offsets), *offsets) +
               config_bytes + b''.join(samples))
        basename = 'shard.%05d.mds' % len(shards)
        path = os.path.join(args.dir, basename)
        with open(path, 'wb') as f:
            f.write(raw)
        shard = dict(config)
        shard.update({'raw_data': file_info(basename, raw, hashes), 'samples': len(samples),
                      'zip_data': None})
        if args.compression:
            zip_name, zipped = compress(args.compression, path, raw)
            shard['zip_data'] = file_info(zip_name, zipped, hashes)
            if args.drop_raw:
                os.remove(path)
        shards.append(shard)
    with open(os.path.join(args.dir, 'index.json'), 'w') as f:
        json.dump({'shards': shards, 'version': 2}, f, sort_keys=True)

def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest='what', required=True)
    tf = sub.add_parser('tfrecord')
    tf.add_argument('out')
    tf.add_argument('first', type=int)
    tf.add_argument('count', type=int)
    tf.add_argument('--codec', default='none', choices=['none', 'gzip', 'zlib'])
    mds = sub.add_parser('mds')
    mds.add_argument('dir')
    mds.add_argument('count', type=int)
    mds.add_argument('per_shard', type=int)
    mds.add_argument('--compression', default=None)
    mds.add_argument('--hashes', default='')
    mds.add_argument('--drop-raw', action='store_true')
    args = parser.parse_args()
    write_tfrecord(args) if args.what == 'tfrecord' else write_mds(args)

if __name__ == '__main__':
    main()
