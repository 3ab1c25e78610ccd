"""TFRecord framing for the test tools, written from TF's documented format and sharing no
code with psflow: each record is a little-endian u64 length, the masked CRC-32C of those 8
bytes, the data, and the masked CRC-32C of the data."""
import struct


def crc32c(data):
    table = crc32c.table
    if table is None:
        table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
        crc32c.table = table
    c = 0xFFFFFFFF
    for byte in data:
        c = table[(c ^ byte) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


crc32c.table = None


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    offset = 0
    while offset < len(data):
        if len(data) - offset < 12:
            raise ValueError(f"{path}: truncated record header at byte {offset}")
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if length_crc != masked(header):
            raise ValueError(f"{path}: length checksum mismatch at byte {offset}")
        body = data[offset + 12:offset + 12 + length]
        footer = data[offset + 12 + length:offset + 16 + length]
        if len(body) != length or len(footer) != 4:
            raise ValueError(f"{path}: truncated record at byte {offset}")
        if struct.unpack("<I", footer)[0] != masked(body):
            raise ValueError(f"{path}: data checksum mismatch at byte {offset}")
        yield body
        offset += 16 + length


def frame(record):
    """The bytes of one record holding `record`."""
    header = struct.pack("<Q", len(record))
    return header + struct.pack("<I", masked(header)) + record + struct.pack("<I", masked(record))
