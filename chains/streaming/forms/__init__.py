"""The three wire forms of an endpoint's stream: framed, server-sent events and raw.

The server encodes the generator's values in the form the caller negotiated (framed is what
stubs ask for); the stub decodes the framed form. The formats are described in
``docs/wire-protocol.md``.
"""

from chains.streaming.forms.framed import decode_framed, encode_framed
from chains.streaming.forms.producer import ErrorHook, StreamEncoder
from chains.streaming.forms.raw import decode_raw, encode_raw, raw_media_type
from chains.streaming.forms.sse import encode_sse

__all__ = [
    "ErrorHook",
    "StreamEncoder",
    "decode_framed",
    "decode_raw",
    "encode_framed",
    "encode_raw",
    "encode_sse",
    "raw_media_type",
]
