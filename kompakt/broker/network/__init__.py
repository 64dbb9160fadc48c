"""How a connection's answers reach the socket beyond what the event loop's transport does
(direct_send.py: file ranges with sendfile)."""
