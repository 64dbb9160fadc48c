"""The network side of the broker: from a client's socket to a handler and back.

    connection.py   one client connection (asyncio BufferedProtocol): frames in, requests started
                    one after another, responses out in request order; the quota mute, EOF, close
    dispatch.py     a request frame -> header, version gate, body decode, handler, response bytes
    context.py      RequestContext: what a handler sees of one request (broker, header, peer,
                    listener, session) and the one way to authorize
    limits.py       max.connections(.per.ip) and queued.max.request.bytes across listeners
    direct_send.py  file ranges to the socket with sendfile (Fetch's zero-copy answers)
    tls_transport.py  TLS listeners: our own TLS over ssl.SSLObject (handshake, decryption) whose
                    large answers are read, encrypted and sent, and large requests decrypted, by the
                    broker's kompakt-tls threads
    tls_records.py  the native reader those threads decrypt with (many TLS records a GIL release)

Invariants: responses leave a connection in request order; a request starts only after the one
before it on its connection applied its effects (connection.py's docstring); handlers see the
broker only through their RequestContext, never a connection. Nothing below the broker (protocol,
storage, cleaner) imports from here.
"""
