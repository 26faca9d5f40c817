"""One module per MAAS API collection; each class wraps the shared request path (``_http.Http``)."""
