"""The HTTP edge (with the mock, the only starlette/uvicorn user): app, edge, the one handler, forwarding,
guard, body, reload."""
